package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"termlink/server/config"
	"termlink/server/servertest"
)

// enroll-test against a real server: a code, the approval (--approve,
// loopback operator), the token, a connection and a reply; the token is
// not printed.
func TestEnrollTestCommand(t *testing.T) {
	srv := servertest.Start(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.Enrollment = true
		c.Channels["terminal-dev"] = ch
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	status := run(ctx, []string{"enroll-test", "--server", "http://" + srv.Addr, "--peer-id", "rig-1", "--approve", "--timeout", "50s"}, &out, &errb)
	if status != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", status, out.String(), errb.String())
	}
	for _, want := range []string{"pairing code ", "approved through the operator API", "enrolled as peer_id rig-1", "reply: You said: hello from enroll-test", "PASS enroll-test"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "tl_") {
		t.Fatalf("the output shows the token:\n%s", out.String())
	}
	// A channel without enrollment: a clear refusal.
	off := servertest.Start(t, nil)
	out.Reset()
	errb.Reset()
	if status := run(ctx, []string{"enroll-test", "--server", "http://" + off.Addr, "--approve", "--timeout", "20s"}, &out, &errb); status != 1 ||
		!strings.Contains(errb.String(), "enrollment is off on channel") {
		t.Fatalf("exit %d, stderr %s", status, errb.String())
	}
}
