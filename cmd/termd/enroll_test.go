package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"termlink/server/config"
	"termlink/server/servertest"
)

// termd refuses a token file group or others may read, naming the file
// and the fix, before it opens the board.
func TestTermdRefusesReadableTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("tl_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--server", "ws://127.0.0.1:1/api/channels/x/ws", "--state-dir", t.TempDir(), "--token-file", path})
	if err == nil || !strings.Contains(err.Error(), "--token-file: token file "+path+" has mode 0644") || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("run: %v", err)
	}
	if strings.Contains(err.Error(), "tl_secret") {
		t.Fatalf("the error shows the token: %v", err)
	}
}

// termd --enroll on a console (the sim board, a real PTY in tmux): the
// pairing code is on the status line; once approved it is gone, "Enrolled
// as" stays in view (status line and conversation) while termd is
// online, and the conversation goes on (the first message is shown).
func TestEnrollOnTheConsole(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.Enrollment = true
		c.Channels["terminal-dev"] = ch
	})
	state := filepath.Join(t.TempDir(), "state")
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim --state-dir %s --enroll", termdRun, srv.URL, state))
	s := waitScreen("Pairing code")
	m := regexp.MustCompile(`Pairing code ([2-9A-HJ-NP-Z]{3}-[2-9A-HJ-NP-Z]{3})`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no pairing code on the screen:\n%s", s)
	}
	resp, err := http.Post("http://"+srv.Addr+"/api/enrollments/"+m[1]+"/approve", "application/json",
		strings.NewReader(`{"peer_id": "desk-3", "name": "Desk"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("approve %s: HTTP %d", m[1], resp.StatusCode)
	}
	s = waitScreen("online")
	if !strings.Contains(s, "NOTICE: Enrolled as desk-3") {
		t.Errorf("online, the status line does not say it enrolled:\n%s", s)
	}
	if strings.Contains(s, "Pairing code") {
		t.Errorf("the pairing code stays after approval:\n%s", s)
	}
	tm("send-keys", "-l", "first words")
	tm("send-keys", "Enter")
	s = waitScreen("You said: first words")
	if strings.Count(s, "first words") < 2 { // the message sent, then the answer
		t.Errorf("the message sent is not in the conversation:\n%s", s)
	}
	if !strings.Contains(s, "Enrolled as desk-3") || strings.Contains(s, "Pairing code") {
		t.Errorf("after the first message:\n%s", s)
	}
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")
}
