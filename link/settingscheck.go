package link

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of pushed settings both ends hold to (CheckSettings): the
// server takes no document past them, and a device refuses (acks with
// the reason) settings past them.
const (
	MaxIdleText        = 256           // bytes
	MaxSettingsSeconds = 7 * 24 * 3600 // idle_seconds, backlight_off_after, notice_seconds
	MaxSettingsTags    = 32
	MaxSettingsTagKey  = 64
	MaxSettingsTagVal  = 128
)

var settingsTagKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckSettings says which value of s a device cannot apply, and why
// ("", "": none): beyond what decoding a settings frame checks, the
// idle text (at most MaxIdleText bytes, text without control characters
// but newlines), the seconds (at most MaxSettingsSeconds) and the tags
// (at most MaxSettingsTags; keys of A-Z a-z 0-9 . _ -, values of text).
func CheckSettings(s *Settings) (field, msg string) {
	if field, msg := fleetProblem(s); field != "" {
		return field, msg
	}
	if t := s.IdleText; t != nil {
		switch {
		case len(*t) > MaxIdleText:
			return "idle_text", fmt.Sprintf("is %d bytes, at most %d", len(*t), MaxIdleText)
		case !utf8.ValidString(*t) || strings.IndexFunc(*t, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) >= 0:
			return "idle_text", "must be text without control characters (a newline is taken)"
		}
	}
	for _, f := range []struct {
		name string
		p    *int
	}{{"idle_seconds", s.IdleSeconds}, {"backlight_off_after", s.BacklightOffAfter}, {"notice_seconds", s.NoticeSeconds}, {"busy_seconds", s.BusySeconds}} {
		if f.p != nil && *f.p > MaxSettingsSeconds {
			return f.name, fmt.Sprintf("is %d seconds, at most %d (a week)", *f.p, MaxSettingsSeconds)
		}
	}
	if len(s.Tags) > MaxSettingsTags {
		return "tags", fmt.Sprintf("%d tags, at most %d", len(s.Tags), MaxSettingsTags)
	}
	for k, v := range s.Tags {
		switch {
		case len(k) > MaxSettingsTagKey || !settingsTagKeyRE.MatchString(k):
			return "tags", fmt.Sprintf("key %q: 1 to %d of A-Z a-z 0-9 . _ -, starting with a letter or digit", k, MaxSettingsTagKey)
		case v == "" || len(v) > MaxSettingsTagVal || !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0:
			return "tags", fmt.Sprintf("tag %q: the value must be 1 to %d bytes of text without control characters", k, MaxSettingsTagVal)
		}
	}
	return "", ""
}
