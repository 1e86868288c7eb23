package link

import (
	"strings"
	"testing"
)

// Settings a device cannot apply, each naming the field; what the
// decoder checks is checked too.
func TestCheckSettings(t *testing.T) {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	for _, tc := range []struct {
		s     Settings
		field string // "" taken
		msg   string
	}{
		{Settings{Version: 1, IdleText: str("Open 9-5\nclosed Sundays"), IdleSeconds: num(MaxSettingsSeconds), Tags: map[string]string{"site": "lobby"}}, "", ""},
		{Settings{Version: 0}, "version", "must be a whole number from 1"},
		{Settings{Version: 1, IdleText: str(strings.Repeat("é", MaxIdleText/2+1))}, "idle_text", "is 258 bytes, at most 256"},
		{Settings{Version: 1, IdleText: str("a\x1b[2J")}, "idle_text", "without control characters"},
		{Settings{Version: 1, NoticeSeconds: num(-1)}, "notice_seconds", "must not be negative"},
		{Settings{Version: 1, BacklightOffAfter: num(MaxSettingsSeconds + 1)}, "backlight_off_after", "at most 604800 (a week)"},
		{Settings{Version: 1, LogLevel: "trace"}, "log_level", "must be debug, info, warn or error"},
		{Settings{Version: 1, Tags: map[string]string{"a b": "c"}}, "tags", `key "a b"`},
		{Settings{Version: 1, Tags: map[string]string{"a": "c\td"}}, "tags", `tag "a": the value`},
		{Settings{Version: 1, Tags: map[string]string{"a": ""}}, "tags", `tag "a": the value`},
	} {
		field, msg := CheckSettings(&tc.s)
		if field != tc.field || !strings.Contains(msg, tc.msg) {
			t.Errorf("%+v: %s %q, want %s %q", tc.s, field, msg, tc.field, tc.msg)
		}
	}
}
