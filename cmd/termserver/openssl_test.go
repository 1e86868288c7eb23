package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/testrig/needtool"
)

// The README's lab CA, made by openssl (testdata/lab-ca.sh), works end to
// end with the real termserver: --tls-cert/--tls-key, a mutual TLS
// channel whose clientCA is the lab CA and whose denyCerts holds kiosk-2's
// fingerprint pasted as openssl prints it; link.Client with CAFile,
// CertFile and KeyFile as termd's --ca-file, --cert and --key: kiosk-1
// is answered, kiosk-2 is refused as revoked.
func TestOpenSSLLabCA(t *testing.T) {
	t.Parallel()
	needtool.Path(t, "openssl", "the lab CA script; apt-get install openssl")
	script, err := filepath.Abs("testdata/lab-ca.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mk := exec.Command("sh", script)
	mk.Dir = dir
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("lab-ca.sh: %v\n%s", err, out)
	}
	fingerprint := func(peer string) string {
		fp, err := exec.Command("openssl", "x509", "-in", filepath.Join(dir, peer+".pem"), "-noout", "-fingerprint", "-sha256").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(fp))
	}
	cfg := filepath.Join(dir, "termserver.json")
	workspace := t.TempDir()
	writeCfg := func(deny ...string) {
		body := fmt.Sprintf(`{"workspace": %q, "tls": {"certFile": "server.pem", "keyFile": "server-key.pem"},
	  "channels": {"terminal-dev": {"accountId": "local", "config": {"clientCA": "ca.pem", "denyCerts": ["%s"]}}}}`,
			workspace, strings.Join(deny, `", "`))
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(fingerprint("kiosk-2"))
	p := start(t, cfg)
	url := "wss://" + p.addr + "/api/channels/terminal-dev/ws"

	device := func(peer string) (*link.Client, <-chan link.Event) {
		c, err := link.NewClient(link.ClientConfig{URL: url, PeerID: peer, StateDir: t.TempDir(),
			CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, peer+".pem"), KeyFile: filepath.Join(dir, peer+"-key.pem"),
			RetryInitial: time.Minute})
		if err != nil {
			t.Fatalf("%s: %v", peer, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return c, c.Events()
	}
	wait := func(events <-chan link.Event, what string, ok func(link.Event) bool) link.Event {
		t.Helper()
		timeout := time.After(testwait.Deadline)
		for {
			select {
			case e := <-events:
				if ok(e) {
					return e
				}
			case <-timeout:
				t.Fatalf("no %s within %v\n%s", what, testwait.Deadline, p.log)
			}
		}
	}

	k1, ev1 := device("kiosk-1")
	if _, err := k1.Send(context.Background(), "hello lab"); err != nil {
		t.Fatal(err)
	}
	reply := wait(ev1, "reply for kiosk-1", func(e link.Event) bool { return e.Kind == link.EventReply && e.Final })
	if reply.Reply == nil || !strings.Contains(reply.Reply.Text, "hello lab") {
		t.Fatalf("reply %+v", reply)
	}
	_ = k1.Delivered(reply.MessageID)

	_, ev2 := device("kiosk-2")
	e := wait(ev2, "refusal of kiosk-2", func(e link.Event) bool { return e.State == link.StateWaiting })
	if !strings.Contains(e.Reason, "403") || !strings.Contains(e.Reason, "revoked") {
		t.Fatalf("kiosk-2 offline with %q, want 403 revoked", e.Reason)
	}

	// Revoking kiosk-1 in the file and sending SIGHUP closes its open
	// connection: no restart needed.
	writeCfg(fingerprint("kiosk-2"), fingerprint("kiosk-1"))
	p.hup(t)
	p.waitLog(t, "client CAs and deny lists reloaded", 1)
	e = wait(ev1, "kiosk-1 offline", func(e link.Event) bool { return e.State == link.StateWaiting })
	if !strings.Contains(e.Reason, "revoked") {
		t.Fatalf("kiosk-1 offline with %q, want its certificate revoked", e.Reason)
	}
}
