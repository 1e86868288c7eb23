package link

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// DefaultChannel is the channel ChannelURL fills in when it is given none.
const DefaultChannel = "terminal-dev"

// ChannelURL turns what a user typed into the WebSocket URL of a channel:
// surrounding spaces are dropped, ws:// and wss:// are kept, http:// and
// https:// become ws:// and wss:// (the scheme in any case), a bare
// host:port gets ws://, and an empty path (or "/") becomes
// /api/channels/<channel>/ws (channel "" is DefaultChannel; one holding
// '/', '?' or '#' is refused). A URL that already has a path is used as
// is. The errors say what is wrong without naming a flag: the caller adds
// that.
func ChannelURL(raw, channel string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("server URL is required, e.g. ws://192.168.1.10:8080/api/channels/terminal-dev/ws")
	}
	if !strings.Contains(raw, "://") {
		raw = "ws://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("server URL %q is not a URL like ws://host:8080/api/channels/%s/ws: %w", raw, channel, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "ws", "http":
		u.Scheme = "ws"
	case "wss", "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("server URL %q: scheme must be ws, wss, http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("server URL %q has no host", raw)
	}
	if u.Path == "" || u.Path == "/" {
		if channel == "" {
			channel = DefaultChannel
		}
		if strings.ContainsAny(channel, "/?#") {
			return "", fmt.Errorf("channel id %q must not contain '/', '?' or '#'", channel)
		}
		u.Path = "/api/channels/" + channel + "/ws"
		u.RawPath = ""
	}
	return u.String(), nil
}
