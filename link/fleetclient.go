package link

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// The client's side of fleet operations (fleet.go). The server's
// requests (update, settings, diag) are handed to the caller on their
// own channel (Client.Fleet), apart from Events: an update takes
// minutes and must not hold messages back. The caller answers with
// Client.Report.

// fleetBuffer is the capacity of the Fleet channel: requests past it,
// while the caller is busy, are dropped with a log line (the server
// sends settings and updates again on the next connect; a diag request
// times out on the server and says so).
const fleetBuffer = 16

// maxResults bounds the diag results waiting for the live connection.
const maxResults = 4

// Fleet returns the server's fleet operation requests: *Update,
// *Settings and *Diag frames, for a client that listed CapUpdate,
// CapSettings or CapDiag. The channel is closed when Run returns.
func (c *Client) Fleet() <-chan Frame { return c.fleetIn }

// SetSettingsVersion sets the settings version the next connect frames
// carry (settings_version): the pushed settings the device applied and
// kept. Report of a SettingsAck without an error sets it too.
func (c *Client) SetSettingsVersion(v int64) { c.settingsVersion.Store(v) }

// SetTags replaces the tags the next connect frames carry (pushed
// settings that set the device's tags); the live connection keeps the
// ones it connected with.
func (c *Client) SetTags(tags map[string]string) {
	c.mu.Lock()
	c.tags = maps.Clone(tags)
	c.mu.Unlock()
}

// connectTags are the tags for the next connect frame.
func (c *Client) connectTags() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tags
}

// Report sends the answer to a fleet operation:
//   - *UpdateStatus: sent now if connected, and again on every connect
//     until the next UpdateStatus replaces it (the server learns the
//     outcome of an update even when it was made offline).
//   - *SettingsAck: the same; without an error it also sets the
//     settings version of the next connect frames.
//   - *DiagResult: sent on the live connection only (ErrNotConnected
//     without one).
//   - *Busy (a client that listed CapUpdate): sent now if connected, and
//     first on every connect until the next Busy replaces it. The caller
//     paces its changes (at most one a second: the server's answer rate).
//   - *Health: the same; a newer one not sent yet replaces it.
func (c *Client) Report(f Frame) error {
	b, err := Encode(f)
	if err != nil {
		return err
	}
	if field, msg := fleetProblem(f); field != "" {
		return fmt.Errorf("link: report %s: %s %s", f.FrameType(), field, msg)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	switch f := f.(type) {
	case *UpdateStatus:
		c.updStatus, c.updQ = b, true
	case *SettingsAck:
		c.setAck, c.setAckQ = b, true
		if f.Error == "" {
			c.settingsVersion.Store(f.Version)
		}
	case *Busy:
		if !slices.Contains(c.cfg.Capabilities, CapUpdate) {
			return fmt.Errorf("link: busy is for a client that lists %q", CapUpdate)
		}
		c.busyFrame, c.busyQ = b, true
	case *Health:
		if c.sess == nil {
			return fmt.Errorf("%w: health is reported on a live connection", ErrNotConnected)
		}
		c.health = b
	case *DiagResult:
		if c.sess == nil {
			return fmt.Errorf("%w: the request this answers is gone with its connection", ErrNotConnected)
		}
		if len(c.results) >= maxResults {
			return fmt.Errorf("link: %d diag results wait to be sent already", len(c.results))
		}
		c.results = append(c.results, b)
	default:
		return fmt.Errorf("link: Report takes update_status, settings_ack, diag_result, busy or health, not %s", f.FrameType())
	}
	if s := c.sess; s != nil {
		s.wake()
	}
	return nil
}

// fleetRequest hands a request from the server to the caller.
func (c *Client) fleetRequest(f Frame) {
	select {
	case c.fleetIn <- f:
	default:
		c.log.Warn("fleet request dropped: the device has not taken the ones before", "type", f.FrameType(), "waiting", len(c.fleetIn))
	}
}

// pendingFleetLocked takes the fleet frames due on the live session.
func (c *Client) pendingFleetLocked(frames [][]byte) [][]byte {
	if c.busyQ && c.busyFrame != nil {
		frames = append(frames, c.busyFrame) // first: before an update_status the server may answer with an update
	}
	c.busyQ = false
	if c.updQ && c.updStatus != nil {
		frames = append(frames, c.updStatus)
	}
	if c.setAckQ && c.setAck != nil {
		frames = append(frames, c.setAck)
	}
	c.updQ, c.setAckQ = false, false
	frames = append(frames, c.results...)
	c.results = slices.Delete(c.results, 0, len(c.results))
	if c.health != nil {
		frames, c.health = append(frames, c.health), nil
	}
	return frames
}

// HTTPClient is an HTTP client with the link's TLS (its CA file, its
// client certificate), for what a fleet operation fetches from the
// channel's server (a release's binary). Each call builds a new one.
func (c *Client) HTTPClient() (*http.Client, error) {
	conf, err := c.cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf, Proxy: http.ProxyFromEnvironment,
		TLSHandshakeTimeout: c.cfg.ConnectTimeout, ResponseHeaderTimeout: time.Minute}}, nil
}

// ResolveURL resolves ref (a URL, or a path on the channel's server such
// as an update's url) against the channel URL, with ws:// as http:// and
// wss:// as https://.
func (c *Client) ResolveURL(ref string) (string, error) {
	base, err := url.Parse(c.cfg.URL)
	if err != nil {
		return "", err
	}
	switch base.Scheme {
	case "ws":
		base.Scheme = "http"
	case "wss":
		base.Scheme = "https"
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("link: url %q: %w", ref, err)
	}
	u := base.ResolveReference(r)
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("link: url %q: want http or https, or a path on the server", ref)
	}
	return u.String(), nil
}
