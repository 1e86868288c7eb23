package device_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"periph.io/x/conn/v3/physic"

	"termlink/device"
	"termlink/display/hd44780"
	"termlink/link"
	"termlink/link/linktest"
	"termlink/testrig/needtool"
)

// The figure of issue 27: termd's CPU on ARMv6 (qemu-arm-static) while a
// long reply streams (2,000 characters in 100 deltas, 8 a second, as the
// server coalesces them) against the same reply arriving whole after the
// same 12.5 s, and an idle run of the same length (no message) for the
// floor: process start, qemu's translation, the heartbeat. The child is
// this package's test binary cross-built for GOARCH=arm GOARM=6 (static,
// as make pi builds termd) running termd's daemon (device.Daemon, the
// link client with a file outbox, LCDView on the real HD44780 driver) on
// a 20x4 LCD whose I2C bus only counts the bytes (the emulator's decoding
// would be CPU a Pi does not spend); the scripted server runs here. CPU
// is the child's user+sys (its rusage, what /usr/bin/time -v reports).
//
//	TERMLINK_FIGURE=stream-cpu go test -run TestStreamCPUOnARM -v ./device/
func TestStreamCPUOnARM(t *testing.T) {
	if os.Getenv("TERMLINK_FIGURE") != "stream-cpu" {
		t.Skip("a benchmark figure: TERMLINK_FIGURE=stream-cpu")
	}
	qemu := needtool.Path(t, "qemu-arm-static", "apt-get install qemu-user-static")
	bin := filepath.Join(t.TempDir(), "device.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm", "GOARM=6")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the ARMv6 test binary: %v\n%s", err, out)
	}
	const (
		chars  = 2000
		deltas = 100
		every  = 125 * time.Millisecond
	)
	reply := strings.Repeat("The quick brown fox jumps over the lazy dog. ", chars/45+1)[:chars]
	pieces := linktest.Split(reply, deltas)
	type result struct {
		cpu          time.Duration
		bytes, tx    string
		wall         time.Duration
		load0, load1 string
	}
	runs := map[string][]result{}
	modes := []string{"idle", "whole", "stream"}
	for round := 0; round < 3; round++ {
		for _, mode := range modes {
			srv := linktest.New(t)
			srv.OnMessage(func(s *linktest.Server, m *link.Message) {
				_ = s.Send(&link.Ack{MessageID: m.MessageID, SessionID: "s", Accepted: true})
				go func() {
					for i, p := range pieces {
						time.Sleep(every)
						if mode == "stream" {
							_ = s.Send(&link.Delta{MessageID: m.MessageID, Seq: int64(i + 1), Text: p})
						}
					}
					_ = s.Send(linktest.Reply(m.MessageID, reply, link.FinishStop))
				}()
			})
			load0 := loadavg()
			cmd := exec.Command(qemu, bin, "-test.run", "^$")
			cmd.Env = append(os.Environ(), "TERMD_CHILD=cpu", "TERMD_CPU_URL="+srv.URL(), "TERMD_CPU_MODE="+mode,
				"TERMD_CPU_STATE="+t.TempDir(), fmt.Sprintf("TERMD_CPU_IDLE=%s", time.Duration(deltas)*every))
			start := time.Now()
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", mode, err, out)
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			var bytes, tx string
			fmt.Sscanf(strings.TrimSpace(string(out)), "done bytes=%s tx=%s", &bytes, &tx)
			runs[mode] = append(runs[mode], result{cpu: cpu, bytes: bytes, tx: tx, wall: time.Since(start), load0: load0, load1: loadavg()})
			t.Logf("round %d %-6s cpu %v wall %v i2c bytes %s tx %s load %s -> %s", round+1, mode, cpu.Round(time.Millisecond),
				time.Since(start).Round(time.Millisecond), bytes, tx, load0, loadavg())
		}
	}
	med := map[string]time.Duration{}
	for _, mode := range modes {
		cpus := []time.Duration{}
		for _, r := range runs[mode] {
			cpus = append(cpus, r.cpu)
		}
		slices.Sort(cpus)
		med[mode] = cpus[len(cpus)/2]
		t.Logf("median %-6s %v (runs %v)", mode, med[mode].Round(time.Millisecond), cpus)
	}
	t.Logf("streaming costs %v more than whole (%v per delta); above idle: whole %v, stream %v",
		(med["stream"] - med["whole"]).Round(time.Millisecond), ((med["stream"] - med["whole"]) / deltas).Round(10*time.Microsecond),
		(med["whole"] - med["idle"]).Round(time.Millisecond), (med["stream"] - med["idle"]).Round(time.Millisecond))
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// BenchmarkStreamDelta is the device's work for one delta of a reply
// that grows to 2,000 characters in 100 deltas, below 20 earlier answers
// of 500 characters: the model takes the event and LCDView draws the
// 20x4 page through the HD44780 driver (on a bus that only counts). Run
// it natively, or cross-built for ARMv6 under qemu-arm-static.
func BenchmarkStreamDelta(b *testing.B) {
	bus := &countBus{}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 4, Cols: 20, Refresh: -1})
	if err != nil {
		b.Fatal(err)
	}
	reply := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000/45+1)[:2000]
	pieces := linktest.Split(reply, 100)
	view := &device.LCDView{Screen: lcd}
	ctx := context.Background()
	now := time.Now()
	var m *device.Model
	text := ""
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%100 == 0 {
			m = &device.Model{Link: link.StateConnected}
			for j := 0; j < 20; j++ {
				id := fmt.Sprint("old-", j)
				m.Sent(id, "and then?")
				m.Apply(link.Event{Kind: link.EventReply, MessageID: id, Reply: linktest.Reply(id, reply[:500], link.FinishStop), Final: true})
			}
			m.Sent("m-1", "tell me a long story")
			text = ""
		}
		text += pieces[i%100]
		m.Apply(link.Event{Kind: link.EventDelta, MessageID: "m-1", Seq: int64(i%100 + 1), Text: text})
		if err := view.Render(ctx, m, now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(bus.bytes.Load())/float64(b.N), "i2c-bytes/delta")
}

// countBus is an I2C bus that takes every transaction and counts it: the
// kernel's write, without the emulator's decoding.
type countBus struct{ tx, bytes atomic.Int64 }

func (b *countBus) String() string                  { return "count" }
func (b *countBus) SetSpeed(physic.Frequency) error { return nil }
func (b *countBus) Tx(_ uint16, w, r []byte) error {
	b.tx.Add(1)
	b.bytes.Add(int64(len(w) + len(r)))
	clear(r)
	return nil
}

// cpuChild is the child of TestStreamCPUOnARM: termd's daemon on a 20x4
// LCD on a countBus; it asks once (not in mode idle), waits until the
// reply is drawn and confirmed (or TERMD_CPU_IDLE passed, in mode idle),
// prints "done bytes=N tx=N" and exits.
func cpuChild() int {
	bus := &countBus{}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 4, Cols: 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	client, err := link.NewClient(link.ClientConfig{URL: os.Getenv("TERMD_CPU_URL"), PeerID: "cpu-kiosk",
		StateDir: os.Getenv("TERMD_CPU_STATE"), Logger: discard, Stream: true,
		Capabilities: append(link.DefaultCapabilities(), link.CapScreen)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inputs := make(chan device.Input, 1)
	idle := os.Getenv("TERMD_CPU_MODE") == "idle"
	if !idle {
		inputs <- device.Input{Kind: device.InputSend, Text: "tell me a long story"}
	}
	d := &device.Daemon{Client: client, View: &device.LCDView{Screen: lcd}, Inputs: inputs, Logger: discard}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	// The same polling in every mode, so that idle is the floor of the
	// others.
	wait, _ := time.ParseDuration(os.Getenv("TERMD_CPU_IDLE"))
	until := time.Now().Add(wait)
	for idle && time.Now().Before(until) || !idle && (client.Stats().Replies == 0 || client.Status().Pending != 0) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "child: Run:", err)
		return 1
	}
	fmt.Printf("done bytes=%d tx=%d\n", bus.bytes.Load(), bus.tx.Load())
	return 0
}
