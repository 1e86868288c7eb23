package config

import (
	"strings"
	"testing"
)

// maxNoticesPerPeer bounds a channel's notice mailboxes: absent means the
// server's default (0 here), both spellings are accepted, and values out
// of 1..10000 are refused with the key's path.
func TestMaxNoticesPerPeer(t *testing.T) {
	doc := func(v string) string {
		return `{"channels": {"kiosks": {"accountId": "a", "config": {` + v + `}}}}`
	}
	for _, tc := range []struct {
		body string
		want int
	}{
		{doc(``), 0},
		{doc(`"maxNoticesPerPeer": 5`), 5},
		{doc(`"max_notices_per_peer": 10000`), 10000},
	} {
		cfg, err := Parse([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got := cfg.Channels["kiosks"].Config.MaxNoticesPerPeer; got != tc.want {
			t.Errorf("%s: MaxNoticesPerPeer %d, want %d", tc.body, got, tc.want)
		}
	}
	for _, bad := range []string{`0`, `10001`, `-1`, `"100"`, `1.5`} {
		_, err := Parse([]byte(doc(`"maxNoticesPerPeer": ` + bad)))
		if err == nil || !strings.Contains(err.Error(), "channels.kiosks.config.maxNoticesPerPeer") {
			t.Errorf("maxNoticesPerPeer %s: error %v, want one naming the key", bad, err)
		}
	}
}
