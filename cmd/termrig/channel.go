package main

// Which channel a fleet command acts on (issue 40). A command given
// --channel acts on it. Without it, termrig asks the server for its
// channels (GET /api/channels): the only one is taken; of several, the
// one that holds every device the command names (--peer, --peers, --tag,
// a rollout id) is taken, and termrig says so on stderr; otherwise the
// command is refused (exit 2) naming the channels. It never falls back
// to a default channel the server may not even have.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// channelFlag adds --channel; "" (the default) means: ask the server.
func channelFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("channel", "", what+" `id`; without it, the server's only channel, or the one that holds the devices named (several: say which)")
}

// selection is what a command names, for finding its channel.
type selection struct {
	peers     []string // devices by peer id (all of them must be on the channel)
	tag       string   // key=value: the devices tagged so
	rolloutID string   // a rollout
}

func (s selection) String() string {
	switch {
	case len(s.peers) == 1:
		return "peer " + s.peers[0]
	case len(s.peers) > 1:
		return "peers " + strings.Join(s.peers[:min(len(s.peers), 5)], ", ") + map[bool]string{true: ", …", false: ""}[len(s.peers) > 5]
	case s.tag != "":
		return "the devices tagged " + s.tag
	case s.rolloutID != "":
		return "rollout " + s.rolloutID
	}
	return ""
}

// serverChannels lists the ids of the server's enabled channels, in the
// server's order.
func (c *apiClient) serverChannels(ctx context.Context) ([]string, error) {
	var l struct {
		Channels []struct {
			ChannelID string `json:"channel_id"`
			Enabled   bool   `json:"enabled"`
		} `json:"channels"`
	}
	if err := c.getJSON(ctx, c.base+"/api/channels", "listing the server's channels", &l); err != nil {
		return nil, err
	}
	var ids []string
	for _, ch := range l.Channels {
		if ch.Enabled && ch.ChannelID != "" {
			ids = append(ids, ch.ChannelID)
		}
	}
	return ids, nil
}

// channelFor is the channel a command acts on: given (--channel) when
// not "", else as the file's comment says. A note on which channel was
// taken, and why, goes to a.stderr when the server has several.
func (a *app) channelFor(ctx context.Context, c *apiClient, given string, sel selection) (string, error) {
	if given != "" {
		return given, nil
	}
	ids, err := c.serverChannels(ctx)
	if err != nil {
		return "", err
	}
	switch len(ids) {
	case 0:
		return "", errors.New("this server has no enabled channel")
	case 1:
		return ids[0], nil
	}
	refuse := func(why string) error {
		if why != "" {
			why = "; " + why
		}
		return usagef("this server has channels %s: say which with --channel%s", strings.Join(ids, ", "), why)
	}
	if sel.String() == "" {
		return "", refuse("")
	}
	var on []string // the channels that hold what sel names
	var why string
	switch {
	case len(sel.peers) > 0:
		on, why, err = c.channelsOfPeers(ctx, ids, sel.peers)
	case sel.tag != "":
		on, err = c.channelsOfTag(ctx, ids, sel.tag)
	case sel.rolloutID != "":
		on, err = c.channelsOfRollout(ctx, ids, sel.rolloutID)
	}
	if err != nil {
		return "", err
	}
	switch {
	case why != "":
		return "", refuse(why)
	case len(on) == 0:
		return "", refuse(sel.String() + " is on none of them")
	case len(on) > 1:
		return "", refuse(sel.String() + " is on " + strings.Join(on, " and "))
	}
	fmt.Fprintf(a.stderr, "termrig: channel %s: %s is there (this server has channels %s)\n", on[0], sel, strings.Join(ids, ", "))
	return on[0], nil
}

// channelsOfPeers is the channel that knows every peer, or why there is
// none: a peer no channel knows, a peer on two, peers on different ones.
func (c *apiClient) channelsOfPeers(ctx context.Context, ids, peers []string) (on []string, why string, err error) {
	where := map[string][]string{} // peer -> the channels that know it
	for _, ch := range ids {
		known, err := c.peerIDs(ctx, ch)
		if err != nil {
			return nil, "", err
		}
		for _, p := range peers {
			if known[p] {
				where[p] = append(where[p], ch)
			}
		}
	}
	var nowhere, twice []string
	chans := map[string]bool{}
	for _, p := range peers {
		switch w := where[p]; len(w) {
		case 0:
			nowhere = append(nowhere, p)
		case 1:
			chans[w[0]] = true
		default:
			twice = append(twice, p+" is on "+strings.Join(w, " and "))
		}
	}
	switch {
	case len(twice) > 0:
		return nil, strings.Join(twice[:min(len(twice), 5)], ", "), nil
	case len(nowhere) > 0 && len(chans) == 0:
		return nil, "", nil
	case len(nowhere) > 0:
		return nil, fmt.Sprintf("%s: no channel knows it (a device is known once it has connected)", strings.Join(nowhere[:min(len(nowhere), 5)], ", ")), nil
	case len(chans) > 1:
		var parts []string
		for _, p := range peers[:min(len(peers), 5)] {
			parts = append(parts, p+" is on "+where[p][0])
		}
		return nil, "the devices are on different channels: " + strings.Join(parts, ", "), nil
	}
	for ch := range chans {
		on = append(on, ch)
	}
	return on, "", nil
}

// peerIDs is the set of peers the channel knows, page by page.
func (c *apiClient) peerIDs(ctx context.Context, channel string) (map[string]bool, error) {
	ids := map[string]bool{}
	cursor := ""
	for range 1000 { // 1000 pages of 1000: far more than a channel holds
		u := c.base + "/api/channels/" + url.PathEscape(channel) + "/peers?limit=1000"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Peers []struct {
				PeerID string `json:"peer_id"`
			} `json:"peers"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := c.getJSON(ctx, u, "listing the devices of channel "+channel, &page); err != nil {
			return nil, err
		}
		for _, p := range page.Peers {
			ids[p.PeerID] = true
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return ids, nil
		}
		cursor = *page.NextCursor
	}
	return ids, nil
}

// channelsOfTag lists the channels with a device tagged tag (key=value).
func (c *apiClient) channelsOfTag(ctx context.Context, ids []string, tag string) ([]string, error) {
	k, v, ok := strings.Cut(tag, "=")
	if !ok {
		return nil, usagef("--tag %q: want key=value, e.g. --tag site=lobby", tag)
	}
	var on []string
	for _, ch := range ids {
		n, err := c.countTagged(ctx, ch, k, v)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			on = append(on, ch)
		}
	}
	return on, nil
}

// countTagged is 0 when no device of the channel has the tag, else 1.
func (c *apiClient) countTagged(ctx context.Context, channel, k, v string) (int, error) {
	var page struct {
		Peers []struct{} `json:"peers"`
	}
	u := c.base + "/api/channels/" + url.PathEscape(channel) + "/peers?limit=1&tag=" + url.QueryEscape(k+":"+v)
	if err := c.getJSON(ctx, u, "listing the devices of channel "+channel+" tagged "+k+"="+v, &page); err != nil {
		return 0, err
	}
	return len(page.Peers), nil
}

// channelsOfRollout lists the channels that hold rollout id.
func (c *apiClient) channelsOfRollout(ctx context.Context, ids []string, id string) ([]string, error) {
	var on []string
	for _, ch := range ids {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.rolloutsURL(ch)+"/"+url.PathEscape(id), nil)
		if err != nil {
			return nil, err
		}
		_, err = c.do(req, "looking for rollout "+id+" on channel "+ch)
		var he *httpError
		switch {
		case errors.As(err, &he) && he.status == http.StatusNotFound:
		case err != nil:
			return nil, err
		default:
			on = append(on, ch)
		}
	}
	return on, nil
}

// selected reports whether the channel has a device sel names (for a
// write that would otherwise reach no device).
func (c *apiClient) selected(ctx context.Context, channel string, sel selection) (bool, error) {
	switch {
	case len(sel.peers) > 0:
		known, err := c.peerIDs(ctx, channel)
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(sel.peers, func(p string) bool { return known[p] }), nil
	case sel.tag != "":
		k, v, _ := strings.Cut(sel.tag, "=")
		n, err := c.countTagged(ctx, channel, k, v)
		return n > 0, err
	}
	return true, nil
}
