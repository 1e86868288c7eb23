package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"termlink/internal/textcut"
	"unicode"
	"unicode/utf8"
	"unique"
)

// The byte budget of one peer. What a device says of itself in connect
// (name, board, version, capabilities, tags) is measured as the registry
// writes it: JSON without HTML escaping, so "<" costs 1 byte, not 6.
// Past MaxDeviceBytes the tags that do not fit are dropped (in key
// order), then the capabilities, and the device is told in the
// connect's "ignored" event; the connection is kept.
const (
	MaxDeviceBytes = 2048
	// MaxScreenBytes bounds a screen mirror's rows as written (JSON
	// strings without their quotes); rows past it are cut. Only online
	// devices keep a mirror.
	MaxScreenBytes = 4096
	// peerOverhead is what a stored record costs beside what the device
	// says and its ids: field names, times, reconnect counts (at most 60).
	peerOverhead = 600
)

// ParseTagFilter parses the tag query values of the peers API, each
// "key:value"; all must match.
func ParseTagFilter(values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(values))
	for _, v := range values {
		k, val, ok := strings.Cut(v, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("tag %q: want key:value, e.g. tag=site:lobby", truncate(v, 80))
		case checkTagKey(k) != nil:
			return nil, fmt.Errorf("tag %q: %v", truncate(v, 80), checkTagKey(k))
		case checkTagValue(val) != nil:
			return nil, fmt.Errorf("tag %q: %v", truncate(v, 80), checkTagValue(val))
		}
		if prev, dup := out[k]; dup && prev != val {
			return nil, fmt.Errorf("tag %q: key %q is already given as %q; a device has one value per key", truncate(v, 80), k, prev)
		}
		out[k] = val
	}
	return out, nil
}

// MaxTagBytes bounds the tags pushed settings give a device (encoded
// as the registry keeps them), so that they fit its MaxDeviceBytes beside
// its name, board, version and capabilities.
const MaxTagBytes = MaxDeviceBytes / 2

// CheckTags says what is wrong with tags a device is to be given (pushed
// settings): a key or value the registry would drop, more than MaxTags,
// more than MaxTagBytes; nil when the registry keeps them all.
func CheckTags(tags map[string]string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("%d tags: at most %d", len(tags), MaxTags)
	}
	n := 0
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if err := checkTagKey(k); err != nil {
			return fmt.Errorf("tag %q: %v", truncate(k, 40), err)
		}
		if err := checkTagValue(tags[k]); err != nil {
			return fmt.Errorf("tag %q: %v", truncate(k, 40), err)
		}
		n += encLen(k) + encLen(tags[k]) + 2
	}
	if n > MaxTagBytes {
		return fmt.Errorf("the tags take %d bytes: at most %d", n, MaxTagBytes)
	}
	return nil
}

// CheckTag says what is wrong with one tag's key and value (nil: none).
func CheckTag(key, value string) error {
	if err := checkTagKey(key); err != nil {
		return err
	}
	return checkTagValue(value)
}

func checkTagKey(k string) error {
	switch {
	case k == "":
		return errors.New("the key is empty")
	case len(k) > MaxTagKey:
		return fmt.Errorf("the key is longer than %d bytes", MaxTagKey)
	case !tagKeyRE.MatchString(k):
		return errors.New("the key may hold only A-Z a-z 0-9 . _ - and must start with a letter or digit")
	}
	return nil
}

func checkTagValue(v string) error {
	switch {
	case v == "":
		return errors.New("the value is empty")
	case len(v) > MaxTagValue:
		return fmt.Errorf("the value is longer than %d bytes", MaxTagValue)
	case !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0:
		return errors.New("the value must be UTF-8 text without control characters")
	}
	return nil
}

// sanitize bounds what a device says about itself; ignored lists what was
// dropped or cut, for the operator. Fields are kept first, then tags (in
// key order), then capabilities, while the encoded total stays within
// MaxDeviceBytes.
func sanitize(d Device) (Device, []string) {
	var ignored []string
	for _, f := range []struct {
		name string
		p    *string
	}{{"device_name", &d.DeviceName}, {"board", &d.Board}, {"version", &d.Version}, {"platform", &d.Platform}} {
		if len(*f.p) > MaxField || !utf8.ValidString(*f.p) {
			*f.p = truncate(strings.ToValidUTF8(*f.p, "?"), MaxField)
			ignored = append(ignored, f.name+" cut to "+fmt.Sprint(MaxField)+" bytes")
		}
	}
	if d.BinarySHA256 != "" && !isSHA256(d.BinarySHA256) {
		d.BinarySHA256 = ""
		ignored = append(ignored, "binary_sha256: not 64 lowercase hex digits")
	}
	used := encLen(d.DeviceName) + encLen(d.Board) + encLen(d.Version) + encLen(d.Platform)
	overBudget := fmt.Errorf("over the %d-byte budget of what a device says of itself", MaxDeviceBytes)
	tags := make(map[string]string, min(len(d.Tags), MaxTags))
	keys := make([]string, 0, len(d.Tags))
	for k := range d.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := d.Tags[k]
		err := checkTagKey(k)
		if err == nil {
			err = checkTagValue(v)
		}
		if err == nil && len(tags) >= MaxTags {
			err = fmt.Errorf("more than %d tags", MaxTags)
		}
		n := encLen(k) + encLen(v) + 2 // ':' and ','
		if err == nil && used+n > MaxDeviceBytes {
			err = overBudget
		}
		if err != nil {
			ignored = append(ignored, fmt.Sprintf("tag %q: %v", truncate(k, 40), err))
			continue
		}
		used += n
		tags[k] = v
	}
	d.Tags = tags
	if len(tags) == 0 {
		d.Tags = nil // an empty map is a heap object per device; nil reads the same
	}
	var caps []string // made at the first one dropped; until then d's own list is kept
	dropped, kept := false, 0
	for i, c := range d.Capabilities {
		n := encLen(c) + 1
		why := ""
		switch {
		case kept >= MaxCaps || len(c) > MaxField:
			why = fmt.Sprintf("capability %q", truncate(c, 40))
		case used+n > MaxDeviceBytes:
			why = fmt.Sprintf("capability %q: %v", truncate(c, 40), overBudget)
		}
		if why != "" {
			if !dropped {
				caps, dropped = slices.Clone(d.Capabilities[:i]), true
			}
			ignored = append(ignored, why)
			continue
		}
		used += n
		kept++
		if dropped {
			caps = append(caps, c)
		}
	}
	if dropped {
		d.Capabilities = caps
	} // else d's own list, which devices saying the same may share (the adapter's intern.Lists): never changed here
	// What a fleet's devices say alike is held once (unique), not per
	// device.
	d.Board, d.Version, d.Platform = unique.Make(d.Board).Value(), unique.Make(d.Version).Value(), unique.Make(d.Platform).Value()
	return d, ignored
}

// deviceBytes is what d (sanitized) costs against MaxDeviceBytes.
func deviceBytes(d Device) int {
	n := encLen(d.DeviceName) + encLen(d.Board) + encLen(d.Version) + encLen(d.Platform)
	for k, v := range d.Tags {
		n += encLen(k) + encLen(v) + 2
	}
	for _, c := range d.Capabilities {
		n += encLen(c) + 1
	}
	return n
}

// peerBytes is what a peer is accounted in its channel's byte budget:
// about the size of its stored record.
func peerBytes(d Device) int {
	return deviceBytes(d) + encLen(d.PeerID) + encLen(d.SessionID) + encLen(d.RemoteAddr) + peerOverhead
}

// stateBytes is what the state fleet parts write of a peer (its update,
// its settings refusal) adds to it in its channel's byte budget.
func stateBytes(u *UpdateState, settingsError string) int {
	n := 0
	if u != nil {
		n += encLen(u.Version) + encLen(u.State) + encLen(u.Reason) + encLen(u.At) + 50 // field names
	}
	if settingsError != "" {
		n += encLen(settingsError) + 20
	}
	return n
}

// encLen is the length of s as a JSON string without HTML escaping, as
// the registry writes it (quotes included).
func encLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6 // \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// newEncoder is the registry's JSON encoder: no HTML escaping ("<" stays
// one byte).
func newEncoder(b *bytes.Buffer) *json.Encoder {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	return e
}

// sanitizeScreen bounds a screen: at most MaxScreenRows rows of at most
// MaxScreenRow bytes, MaxScreenBytes in all as the registry writes them
// (JSON: a control character, an LCD's custom one, takes 6; the rows
// past it are cut).
func sanitizeScreen(s Screen) Screen {
	rows := s.Rows
	if len(rows) > MaxScreenRows {
		rows = rows[:MaxScreenRows]
	}
	out := make([]string, 0, len(rows))
	left := MaxScreenBytes
	for _, row := range rows {
		row = truncate(strings.ToValidUTF8(row, "?"), MaxScreenRow)
		kept := cutEncoded(row, left)
		if kept == "" && row != "" {
			break // not a character of it fits
		}
		out = append(out, kept)
		if left -= encLen(kept) - 2; len(kept) < len(row) || left <= 0 {
			break
		}
	}
	s.Rows = out
	return s
}

// cutEncoded cuts s (valid UTF-8) at a character boundary to at most n
// bytes as the registry writes it (encLen, quotes left out).
func cutEncoded(s string, n int) string {
	used := 0
	for i, r := range s {
		if used += encLen(string(r)) - 2; used > n {
			return s[:i]
		}
	}
	return s
}

// truncate cuts s to at most n bytes at a character boundary.
func truncate(s string, n int) string { return textcut.Cut(s, n) }

// isSHA256 reports 64 lowercase hex digits.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
