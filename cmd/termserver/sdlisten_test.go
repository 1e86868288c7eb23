package main

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

// activated is a termserver command line as systemd starts it from
// termserver.socket: the listening socket f at descriptor 3, LISTEN_FDS=1
// and LISTEN_PID naming the process (set by the shell that execs it).
func activated(t *testing.T, f *os.File, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), "sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, binary}, args...)...)
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "LISTEN_FDNAMES=termserver.socket")
	cmd.ExtraFiles = []*os.File{f}
	return cmd
}

// heldSocket is a listening socket on a free loopback port held the way
// systemd holds termserver.socket's: open in this process, served by none.
func heldSocket(t *testing.T) (*os.File, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // f keeps the socket listening
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, ln.Addr().String()
}

// With the socket passed by the service manager, a restart keeps the
// port: a device that dials while no termserver runs is not refused but
// waits in the socket's queue, and the next termserver serves it.
func TestSocketActivationKeepsThePortAcrossARestart(t *testing.T) {
	t.Parallel()
	f, addr := heldSocket(t)
	cfg := writeConfig(t, t.TempDir(), 0)

	p := startCmd(t, activated(t, f, "--config", cfg))
	if p.addr != addr {
		t.Fatalf("termserver listens on %s, the passed socket is %s", p.addr, addr)
	}
	if !strings.Contains(p.log.String(), "serving the socket the service manager passed") {
		t.Errorf("the log does not say the socket was passed:\n%s", p.log)
	}
	d := connect(t, p, "dev")
	d.send(&link.Message{MessageID: "m-1", Text: "before"})
	if ack, ok := d.read().(*link.Ack); !ok || !ack.Accepted {
		t.Fatalf("ack %+v", ack)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done // no termserver runs now

	// The dial and the upgrade request reach the kernel's queue: no refusal.
	dialed := make(chan error, 1)
	var ws *websocket.Conn
	go func() {
		var err error
		ws, _, err = websocket.DefaultDialer.Dial("ws://"+addr+"/api/channels/terminal-dev/ws", nil)
		dialed <- err
	}()
	probe, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("a dial while termserver is down: %v (the held socket must queue it)", err)
	}
	probe.Close()

	p2 := startCmd(t, activated(t, f, "--config", cfg))
	if err := <-dialed; err != nil {
		t.Fatalf("the device that dialed during the restart: %v\nthe new server's log:\n%s", err, p2.log)
	}
	t.Cleanup(func() { ws.Close() })
	d2 := &device{t: t, ws: ws}
	d2.send(&link.Connect{PeerID: "dev", Capabilities: []string{link.CapText}})
	if _, ok := d2.read().(*link.Connected); !ok {
		t.Fatal("no connected frame after the restart")
	}
	d2.send(&link.Message{MessageID: "m-1", Text: "before"}) // dedupe survived too
	if ack, ok := d2.read().(*link.Ack); !ok || !ack.Duplicate {
		t.Fatalf("resend after the restart: %+v", ack)
	}
}

// What cannot be served is refused at start with the reason: a passed
// socket and --listen both, or a passed descriptor that is no listening
// socket.
func TestSocketActivationRefusals(t *testing.T) {
	t.Parallel()
	f, _ := heldSocket(t)
	regular, err := os.CreateTemp(t.TempDir(), "not-a-socket")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	cfg := writeConfig(t, t.TempDir(), 0)
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
		want string
	}{
		{"listen flag too", activated(t, f, "--config", cfg, "--listen", "127.0.0.1:0"),
			"--listen 127.0.0.1:0 and a socket passed by the service manager (LISTEN_FDS): give one"},
		{"a file", activated(t, regular, "--config", cfg),
			`socket activation: descriptor 3 ("termserver.socket"): not a socket`},
	} {
		out, err := c.cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("%s: %v, want exit 1; output:\n%s", c.name, err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%s: output %q, want %q", c.name, out, c.want)
		}
	}
}
