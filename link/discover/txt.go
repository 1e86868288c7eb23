package discover

import (
	"errors"
	"fmt"
	"strings"
)

// Service is the DNS-SD service type termserver advertises.
const Service = "_termlink._tcp"

// TXTVersion is the txtvers this package writes and reads.
const TXTVersion = "1"

// maxTXTString is the longest string a TXT record holds (RFC 6763 §6.1:
// one length byte).
const maxTXTString = 255

// TXT is what a termserver says about itself in its DNS-SD TXT record:
//
//	txtvers=1
//	path=/api/channels/terminal-dev/ws[,/api/channels/other/ws...]
//	tls=0|1      the channels are served over wss://
//	enroll=0|1   a device without credentials can enroll by pairing code
//
// Unknown keys are ignored (RFC 6763 §6.4: a newer server may add keys);
// a known key with a bad value is an error that says which key.
type TXT struct {
	Paths  []string // WebSocket paths of the enabled channels, default channel first
	TLS    bool
	Enroll bool
}

// Strings encodes t as TXT record strings. Paths that would push the path
// string past 255 bytes are left out; dropped says how many.
func (t TXT) Strings() (txt []string, dropped int) {
	path := "path="
	n := 0
	for i, p := range t.Paths {
		sep := ""
		if n > 0 {
			sep = ","
		}
		if len(path)+len(sep)+len(p) > maxTXTString {
			dropped = len(t.Paths) - i
			break
		}
		path += sep + p
		n++
	}
	return []string{"txtvers=" + TXTVersion, path, "tls=" + bit(t.TLS), "enroll=" + bit(t.Enroll)}, dropped
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ParseTXT decodes the TXT record strings of a _termlink._tcp instance.
// A record without a usable path is an error: a device could not connect.
func ParseTXT(fields []string) (TXT, error) {
	var t TXT
	seen := map[string]bool{}
	for _, f := range fields {
		if len(f) > maxTXTString {
			return TXT{}, fmt.Errorf("TXT string of %d bytes: longer than %d", len(f), maxTXTString)
		}
		key, val, hasVal := strings.Cut(f, "=")
		key = strings.ToLower(key)
		if key == "" {
			continue // RFC 6763 §6.4: a string starting with '=' is ignored
		}
		if seen[key] {
			continue // §6.4: only the first occurrence of a key counts
		}
		seen[key] = true
		switch key {
		case "txtvers":
			if val != TXTVersion {
				return TXT{}, fmt.Errorf("TXT txtvers=%q: this termd reads version %s", val, TXTVersion)
			}
		case "path":
			paths, err := parsePaths(val)
			if err != nil {
				return TXT{}, err
			}
			t.Paths = paths
		case "tls", "enroll":
			if !hasVal || (val != "0" && val != "1") {
				return TXT{}, fmt.Errorf("TXT %s=%q: want 0 or 1", key, val)
			}
			if key == "tls" {
				t.TLS = val == "1"
			} else {
				t.Enroll = val == "1"
			}
		}
	}
	if len(t.Paths) == 0 {
		return TXT{}, errors.New("TXT has no path= (the channel's WebSocket path)")
	}
	return t, nil
}

func parsePaths(val string) ([]string, error) {
	var paths []string
	for p := range strings.SplitSeq(val, ",") {
		if p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("TXT path %q: must start with /", p)
		}
		for _, r := range p {
			if r <= ' ' || r >= 0x7f || r == '?' || r == '#' || r == '%' || r == '\\' {
				return nil, fmt.Errorf("TXT path %q: character %q not allowed", p, r)
			}
		}
		paths = append(paths, p)
	}
	return paths, nil
}
