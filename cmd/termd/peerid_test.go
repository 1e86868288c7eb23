package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/server/servertest"
)

// Two termd on one host with different --state-dir are two devices: the
// server lists two peers, both online, and neither replaces the other.
func TestTwoTermdOneHost(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, nil).Addr
	root := t.TempDir()
	var ids []string
	for _, name := range []string{"one", "two"} {
		state := filepath.Join(root, name)
		_, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim --state-dir %s", termdRun, addr, state))
		waitScreen("online")
		b, err := os.ReadFile(filepath.Join(state, "peer_id"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, strings.TrimSpace(string(b)))
	}
	if ids[0] == ids[1] {
		t.Fatalf("both termd use peer id %s", ids[0])
	}
	testwait.UntilOK(t, "both peers online", func() error {
		resp, err := http.Get("http://" + addr + "/api/channels/terminal-dev/peers?online=true")
		if err != nil {
			return err
		}
		var page struct {
			Peers []struct {
				PeerID string `json:"peer_id"`
			} `json:"peers"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return err
		}
		online := map[string]bool{}
		for _, p := range page.Peers {
			online[p.PeerID] = true
		}
		if online[ids[0]] && online[ids[1]] {
			return nil
		}
		return fmt.Errorf("online peers %v, want both %v", online, ids)
	})
}
