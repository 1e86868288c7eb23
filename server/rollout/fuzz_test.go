package rollout

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzParse: Parse never panics, and what it takes survives a
// round trip through its own encoding.
func FuzzParse(f *testing.F) {
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	good := Rollout{ID: "ro-0123456789ab", ChannelID: "terminal-dev", Version: "v2", Target: Target{Tag: "site=a"}, Canary: 1, Percent: 50,
		State: Paused, Paused: &Pause{PeerID: "d01", State: RolledBack, Reason: "gate", At: now}, Wave: 0, Waves: 2, CreatedBy: "otto", CreatedAt: now, UpdatedAt: now,
		Devices: []Device{{PeerID: "d01", Platform: "linux/arm/6", Wave: 0, State: RolledBack, Reason: "gate", Since: now, Attempt: 1},
			{PeerID: "d02", Platform: "linux/arm/6", Wave: 1, State: Offline, Was: Downloading, Since: now}}}
	b, _ := json.Marshal(good)
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"ro-0123456789ab","devices":[{"peer_id":"a","state":"sent","wave":5}]}`))
	f.Add([]byte("\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data, 100)
		if err != nil {
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Parse(b, 100)
		if err != nil {
			t.Fatalf("its own encoding does not parse: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed it:\n%+v\n%+v", r, r2)
		}
	})
}

func TestParseRefusals(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{"id":"x"}`, "id"},
		{`{"id":"ro-0123456789ab","channel_id":"c","version":"v2","target":{"all":true},"percent":100,"state":"running","wave":-1,"waves":1,"devices":[{"peer_id":"a","state":"bogus","wave":0}]}`, "not a device state"},
		{`{"id":"ro-0123456789ab","channel_id":"c","version":"v2","target":{"all":true},"percent":100,"state":"paused","wave":-1,"waves":1,"devices":[{"peer_id":"a","state":"sent","wave":0}]}`, "paused"},
		{`{"id":"ro-0123456789ab","channel_id":"c","version":"v2","target":{"all":true},"percent":100,"state":"running","wave":-1,"waves":1,"devices":[{"peer_id":"a","state":"sent","wave":0},{"peer_id":"a","state":"sent","wave":0}]}`, "twice"},
		{`{"id":"ro-0123456789ab","extra":1}`, "unknown field"},
	} {
		if _, err := Parse([]byte(tc.data), 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.data, err, tc.want)
		}
	}
}
