package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/settings"
	"termlink/server/settings/settingstest"
)

// The contract of package settings on the cluster's store: each handle
// is another node of the same NATS.
func TestSettingsContract(t *testing.T) {
	t.Parallel()
	settingstest.Run(t, func(t *testing.T) func(settings.Options, settings.Deps) *settings.Store {
		url := startJetStream(t)
		nodes := 0
		return func(opt settings.Options, deps settings.Deps) *settings.Store {
			nodes++
			n := openNode(t, url, fmt.Sprintf("node-%d", nodes))
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
			defer cancel()
			s, err := n.OpenSettings(ctx, opt, deps)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

// What is read from the bucket is checked as the local file is: a record
// that does not parse (written by hand, or by another version) and a key
// that is not a channel's are refused, each logged naming its key, and
// change nothing; the node keeps running, and a change of that channel
// is refused naming the record until it is fixed, after which it works.
func TestSettingsBadRecordRefused(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	n := openNode(t, url, "edge-a")
	var logged syncbuf.Buffer
	reg := settingstest.NewRegistry()
	reg.Device("k", true, true, nil)
	r := settingstest.NewRig(t, func(opt settings.Options, deps settings.Deps) *settings.Store {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
		defer cancel()
		s, err := n.OpenSettings(ctx, opt, deps)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, reg, settings.Options{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	ctx := context.Background()
	if _, err := r.Put(ctx, "ch", settings.Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Hi")}, "op"); err != nil {
		t.Fatal(err)
	}
	st, err := n.SettingsStorage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := SettingsKey("ch")
	for _, bad := range []struct{ value, want string }{
		{`{"version": 2, "tags": {"site=lobby": {"idle_seconds": -1, "version": 2}}}`, "channels.ch.tags.site=lobby.idle_seconds: must not be negative"},
		{`{"version": 2, "colour": 1}`, `channels.ch: unknown field \"colour\"`},
		{`not json`, "channels.ch"},
	} {
		if _, err := st.kv.Put(ctx, key, []byte(bad.value)); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, "the bad record refused in the log", func() bool {
			return strings.Contains(logged.String(), bad.want) && strings.Contains(logged.String(), key)
		})
		if snap := r.Channel("ch"); snap.Version != 1 || *snap.Tags["site=lobby"].IdleText != "Hi" {
			t.Fatalf("a bad record changed the documents: %+v", snap)
		}
	}
	if _, err := st.kv.Put(ctx, "x.not-a-channel", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the bad key refused in the log", func() bool { return strings.Contains(logged.String(), "x.not-a-channel") })
	_, err = r.Put(ctx, "ch", settings.Selector{PeerID: "k"}, link.Settings{LogLevel: "debug"}, "op")
	if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "is refused") {
		t.Fatalf("a change over a bad record: %v; want refused naming %s", err, key)
	}
	// Fixed by hand (removed): the channel starts again, and the device,
	// which says version 1, is brought to the new one.
	if err := st.kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the removal seen", func() bool { return r.Channel("ch").Version == 0 })
	c, err := r.Put(ctx, "ch", settings.Selector{PeerID: "k"}, link.Settings{LogLevel: "debug"}, "op")
	if err != nil || c.Version != 1 || c.Pushed != 1 {
		t.Fatalf("a change once the record is removed: %+v, %v", c, err)
	}
}

func str(s string) *string { return &s }
