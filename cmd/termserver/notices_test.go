package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"termlink/link"
)

// kill -9 right after the notice API answered 201 loses no notice, and
// kill -9 right after a device's ack does not bring the acked notice back:
// both are on disk (the notice log's fsync) before they are answered.
func TestKill9KeepsNoticesAndAcks(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	cfg := writeConfig(t, workspace, 0)
	p := start(t, cfg)
	const n = 20
	var ids []string
	for i := range n {
		resp, err := http.Post("http://"+p.addr+"/api/channels/terminal-dev/peers/kiosk/notices", "application/json",
			strings.NewReader(fmt.Sprintf(`{"text":"notice %d"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST: HTTP %d %s", resp.StatusCode, body)
		}
		id := strings.Split(strings.Split(string(body), `"notice_ids": [`)[1], `"`)[1]
		ids = append(ids, id)
	}
	p.kill(t)

	p = start(t, cfg)
	d := connect(t, p, "kiosk", link.CapText, link.CapNotice)
	for i, id := range ids {
		f, ok := d.read().(*link.Notice)
		if !ok || f.NoticeID != id || f.Text != fmt.Sprintf("notice %d", i) {
			t.Fatalf("notice %d after kill -9: %+v, want %s", i, f, id)
		}
	}
	for _, id := range ids[:n/2] {
		d.send(&link.NoticeAck{NoticeID: id})
	}
	// The acks are handled in order: once the pong is back, all are durable.
	d.send(&link.Ping{})
	for {
		f := d.read()
		if _, ok := f.(*link.Pong); ok {
			break
		}
		t.Fatalf("unexpected %+v", f)
	}
	p.kill(t)

	p = start(t, cfg)
	d = connect(t, p, "kiosk", link.CapText, link.CapNotice)
	for _, id := range ids[n/2:] {
		if f, ok := d.read().(*link.Notice); !ok || f.NoticeID != id {
			t.Fatalf("after the second kill -9: %+v, want %s (the first %d were acked)", f, id, n/2)
		}
	}
	d.send(&link.Ping{})
	if f, ok := d.read().(*link.Pong); !ok {
		t.Fatalf("after the unacked notices: %+v, want nothing more", f)
	}
}
