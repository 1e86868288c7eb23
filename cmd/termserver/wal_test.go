package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"termlink/link"
)

// kill -9 right after many acks across many sessions: after a restart
// every acked message is in its session file exactly once, the replies the
// devices saw are there once too, and no line is written twice (the
// write-ahead log's replay skips what the files already hold).
func TestKill9AfterAcksKeepsEveryMessageOnce(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	cfg := writeConfig(t, workspace, 0)
	const devices, perDevice = 20, 15
	p := start(t, cfg)
	acked := map[string][]string{} // peer -> message ids
	replied := map[string]string{} // peer/message id -> reply text
	for i := range devices {
		peer := fmt.Sprintf("dev-%02d", i)
		d := connect(t, p, peer)
		for m := range perDevice {
			d.send(&link.Message{MessageID: fmt.Sprintf("m-%d", m), Text: fmt.Sprintf("%s says %d", peer, m)})
		}
		for len(acked[peer]) < perDevice {
			switch f := d.read().(type) {
			case *link.Ack:
				if !f.Accepted || f.Duplicate {
					t.Fatalf("%s: ack %+v", peer, f)
				}
				acked[peer] = append(acked[peer], f.MessageID)
			case *link.Message:
				replied[peer+"/"+f.MessageID] = f.Text
			}
		}
	}
	p.kill(t)

	p2 := start(t, cfg)
	p2.kill(t) // the replay has run; recovered runs may have answered some

	for peer, ids := range acked {
		data, err := os.ReadFile(filepath.Join(workspace, "sessions", "terminal-dev:local:"+peer+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			user := regexp.MustCompile(`"role":"user".*"message_id":"` + id + `"`)
			if n := len(user.FindAll(data, -1)); n != 1 {
				t.Errorf("%s %s: %d user records, want 1:\n%s", peer, id, n, data)
			}
			asst := regexp.MustCompile(`"role":"assistant","content":"([^"]*)".*"message_id":"` + id + `"`)
			got := asst.FindAllSubmatch(data, -1)
			if len(got) > 1 {
				t.Errorf("%s %s: %d assistant records, want at most 1:\n%s", peer, id, len(got), data)
			}
			if want, ok := replied[peer+"/"+id]; ok && (len(got) != 1 || string(got[0][1]) != want) {
				t.Errorf("%s %s: reply %q seen by the device is not in the session file once:\n%s", peer, id, want, data)
			}
		}
	}
}
