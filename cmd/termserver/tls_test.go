package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testpki"
	"termlink/internal/testwait"
	"termlink/link"
)

// wssConnect opens a WebSocket over TLS trusting ca, sends connect as peer
// and returns the device and the serial of the certificate the server
// showed.
func wssConnect(t *testing.T, p *proc, ca *testpki.CA, peer string) (*device, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: pool}, HandshakeTimeout: 20 * time.Second}
	ws, _, err := d.Dial("wss://"+p.addr+"/api/channels/terminal-dev/ws", nil)
	if err != nil {
		t.Fatalf("wss dial: %v\n%s", err, p.log)
	}
	t.Cleanup(func() { ws.Close() })
	dev := &device{t: t, ws: ws}
	dev.send(&link.Connect{PeerID: peer, Capabilities: []string{link.CapText}})
	if _, ok := dev.read().(*link.Connected); !ok {
		t.Fatal("no connected frame")
	}
	return dev, ws.UnderlyingConn().(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// ask sends text and reads its ack and reply.
func (d *device) ask(id, text string) {
	d.t.Helper()
	d.send(&link.Message{MessageID: id, Text: text})
	if _, ok := d.read().(*link.Ack); !ok {
		d.t.Fatalf("%s: no ack", id)
	}
	if m, ok := d.read().(*link.Message); !ok || !strings.Contains(m.Text, text) {
		d.t.Fatalf("%s: reply %+v", id, m)
	}
}

// waitLog waits until the process log holds want n times.
func (p *proc) waitLog(t *testing.T, want string, n int) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("termserver to log %q %d times", want, n), func() error {
		if strings.Count(p.log.String(), want) < n {
			return fmt.Errorf("its log:\n%s", p.log)
		}
		return nil
	})
}

// hup sends the process a real SIGHUP.
func (p *proc) hup(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// The real termserver with --tls-cert/--tls-key serves wss://; a SIGHUP
// (the real signal) makes new connections get the new certificate while
// an open WebSocket stays up and answers; a SIGHUP with a broken key file
// keeps the current certificate and says why; termserver keeps running.
func TestSIGHUPReloadsCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	first := ca.Server(t, "server")
	p := start(t, writeConfig(t, t.TempDir(), 0), "--tls-cert", first.CertFile, "--tls-key", first.KeyFile)
	if !strings.Contains(p.log.String(), `url=wss://`) {
		t.Errorf("the channel is not announced with a wss:// URL:\n%s", p.log)
	}

	old, serial := wssConnect(t, p, ca, "kiosk-1")
	if serial != first.Cert.SerialNumber.String() {
		t.Fatalf("server showed serial %s, want %s", serial, first.Cert.SerialNumber)
	}
	old.ask("m1", "before the reload")

	second := ca.Server(t, "server") // new certificate, same files
	p.hup(t)
	p.waitLog(t, "TLS certificate reloaded", 1)
	_, serial = wssConnect(t, p, ca, "kiosk-2")
	if serial != second.Cert.SerialNumber.String() {
		t.Fatalf("after SIGHUP a new connection got serial %s, want the new %s", serial, second.Cert.SerialNumber)
	}
	old.ask("m2", "after the reload") // the open WebSocket was not dropped

	if err := os.WriteFile(second.KeyFile, []byte("-----BEGIN PRIVATE KEY-----\nbroken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.hup(t)
	p.waitLog(t, "TLS certificate not reloaded: keeping the current one", 1)
	_, serial = wssConnect(t, p, ca, "kiosk-3")
	if serial != second.Cert.SerialNumber.String() {
		t.Fatalf("after a failed reload a new connection got serial %s, want %s", serial, second.Cert.SerialNumber)
	}
	old.ask("m3", "still up")
}

// --tls-cert without --tls-key, or a key that does not match, stops
// termserver at start with a message naming the problem.
func TestTLSFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	cfg := writeConfig(t, t.TempDir(), 0)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", a.CertFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", a.CertFile, "--tls-key", b.KeyFile}, "private key does not match public key"},
		{[]string{"--tls-cert", a.CertFile + ".missing", "--tls-key", a.KeyFile}, "no such file or directory"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a termserver that starts anyway is killed
		out, err := exec.CommandContext(ctx, binary, append([]string{"--config", cfg, "--listen", "127.0.0.1:0"}, tc.args...)...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v\n%s\nwant exit status 1 and %q", tc.args, err, out, tc.want)
		}
	}
}
