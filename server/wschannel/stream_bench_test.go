package wschannel

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"termlink/link"
)

// cpuTime is the process's user + system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDelta is the server's cost of one delta frame: an update
// handed to Send (the adapter's open-stream store, the connection's
// slot), the writer started, taking the new suffix, encoding it and
// writing it to a real socket, and the device reading the frame (gorilla's
// ReadMessage, not decoded) before the next update: one delta per op, no
// coalescing. The gap between batches is off, as the updates are paced
// by the reader. ns/op is the round trip; cpu-ns/op is the process's
// CPU time (getrusage) per delta, the reader's included. Each message
// streams 1,024 updates of 8 bytes and then its final reply (read too).
func BenchmarkDelta(b *testing.B) {
	saved := deltaGap
	deltaGap = 0
	defer func() { deltaGap = saved }()
	a := newStreamAdapter(b, Options{})
	d := a.dial("dev", link.CapStream)
	_ = d.ws.SetReadDeadline(time.Now().Add(time.Hour))
	read := func() {
		if _, _, err := d.ws.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
	const per = 1024
	text := strings.Repeat("abcdefg ", per)
	before := a.m.Deltas.Value("terminal-dev")
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime(b)
	id := "m-0"
	for i := range b.N {
		k := i % per
		if k == 0 && i > 0 {
			a.Send(final("dev", id, text))
			read()
			id = "m-" + strconv.Itoa(i/per)
		}
		a.Send(delta("dev", id, text[:8*(k+1)]))
		read()
	}
	b.StopTimer()
	cpu = cpuTime(b) - cpu
	if n := a.m.Deltas.Value("terminal-dev") - before; n != uint64(b.N) {
		b.Fatalf("%d deltas written for %d updates read one by one", n, b.N)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkDeltaBesideReply is BenchmarkDelta's loop with a final reply
// of the same 8 bytes in place of each delta: the yardstick (a frame
// written and read one at a time on the same path).
func BenchmarkDeltaBesideReply(b *testing.B) {
	a := newStreamAdapter(b, Options{})
	d := a.dial("dev", link.CapStream)
	_ = d.ws.SetReadDeadline(time.Now().Add(time.Hour))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime(b)
	for i := range b.N {
		a.Send(final("dev", "m-"+strconv.Itoa(i%1024), "abcdefg "))
		if _, _, err := d.ws.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
