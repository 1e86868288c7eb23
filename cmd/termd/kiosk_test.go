package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"termlink/server/servertest"
)

// termd --tag site=lobby on the sim board: a notice broadcast to the tag
// site=lobby reaches it (the tag went in connect) and shows in the
// console's status line; one for another site does not.
func TestTermdTagNotice(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, nil).Addr
	state := filepath.Join(t.TempDir(), "state")
	_, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim --state-dir %s --tag site=lobby --tag floor=2",
		termdRun, addr, state))
	waitScreen("online")
	post := func(body string) int {
		resp, err := http.Post("http://"+addr+"/api/channels/terminal-dev/notices", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		t.Logf("POST %s: %d %s", body, resp.StatusCode, b)
		return resp.StatusCode
	}
	if code := post(`{"text":"Shop only","tags":{"site":"shop"}}`); code != http.StatusNotFound {
		t.Fatalf("a broadcast to a tag no device has: HTTP %d, want 404", code)
	}
	if code := post(`{"text":"Hello lobby","tags":{"site":"lobby"},"display_seconds":30}`); code != http.StatusCreated {
		t.Fatalf("broadcast to site=lobby: HTTP %d", code)
	}
	s := waitScreen("NOTICE: Hello lobby")
	if strings.Contains(s, "Shop only") {
		t.Fatalf("the notice for another site reached termd:\n%s", s)
	}
}
