package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/server/servertest"
)

// Each state dir gets its own random peer id, generated once and kept;
// an id already kept stays, whatever made it (an older termd derived it
// from /etc/machine-id); a state dir that cannot keep one gets an id that
// is stable across restarts and still differs from another state dir's.
func TestPeerIDPerStateDir(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	idA, unkept, err := loadPeerID(a, "")
	if err != nil || unkept != nil {
		t.Fatalf("loadPeerID(a): %v %v", unkept, err)
	}
	idB, _, err := loadPeerID(b, "")
	if err != nil {
		t.Fatal(err)
	}
	if idA == idB {
		t.Fatalf("two state dirs on one host share the peer id %s", idA)
	}
	if again, _, _ := loadPeerID(a, ""); again != idA {
		t.Fatalf("state dir a: %s then %s", idA, again)
	}
	if kept, _ := os.ReadFile(filepath.Join(a, "peer_id")); strings.TrimSpace(string(kept)) != idA {
		t.Fatalf("state dir a keeps %q, termd uses %s", kept, idA)
	}

	// An id an older termd derived from the machine id stays.
	old := filepath.Join(root, "old")
	os.MkdirAll(old, 0o700)
	sum := sha256.Sum256([]byte("termd peer id\nsomemachine"))
	legacy := "termd-" + hex.EncodeToString(sum[:6])
	os.WriteFile(filepath.Join(old, "peer_id"), []byte(legacy+"\n"), 0o600)
	if id, _, err := loadPeerID(old, ""); err != nil || id != legacy {
		t.Fatalf("an existing state dir: %s %v, want its id %s kept", id, err, legacy)
	}

	// State dirs that cannot keep an id (a file where the dir should be).
	badA, badB := filepath.Join(root, "badA"), filepath.Join(root, "badB")
	for _, f := range []string{badA, badB} {
		os.WriteFile(f, []byte("not a dir\n"), 0o600)
	}
	f1, unkept, err := loadPeerID(badA, "")
	if err != nil || unkept == nil {
		t.Fatalf("unusable state dir: id %s unkept %v err %v", f1, unkept, err)
	}
	f2, _, _ := loadPeerID(badA, "")
	f3, _, _ := loadPeerID(badB, "")
	if _, err := os.Stat("/etc/machine-id"); err == nil && f1 != f2 {
		t.Errorf("an unusable state dir: %s then %s, want the same id at each start", f1, f2)
	}
	if f1 == f3 {
		t.Errorf("two unusable state dirs share the peer id %s", f1)
	}
}

// Two termd on one host with different --state-dir are two devices: the
// server lists two peers, both online, and neither replaces the other.
func TestTwoTermdOneHost(t *testing.T) {
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/api/channels/terminal-dev/peers?online=true")
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Peers []struct {
				PeerID string `json:"peer_id"`
			} `json:"peers"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		online := map[string]bool{}
		for _, p := range page.Peers {
			online[p.PeerID] = true
		}
		if online[ids[0]] && online[ids[1]] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("online peers %v, want both %v", online, ids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
