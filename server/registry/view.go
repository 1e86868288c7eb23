package registry

import (
	"sort"
	"sync"
	"time"

	"termlink/link"
	"termlink/server/fanout"
)

// Devices is the device registry as the server uses it, whichever store
// keeps it: a Registry on the workspace's directory, or package
// cluster's Devices (this node's Registry written behind to the
// cluster's KV, every node's devices in a View for the reads). The
// channel adapters feed it (Connected, Disconnected, MessageAccepted,
// SetScreen), fleet parts write what devices told them (SetUpdate,
// SetSettings, SetTags, SetBusy) and that notices changed (Changed), the fleet
// API reads it. The rules are this package's; registrytest is the
// contract every store passes.
type Devices interface {
	Connected(d Device) (gen uint64, ignored []string, err error)
	Disconnected(channelID, peerID string, gen uint64)
	MessageAccepted(channelID, peerID string)
	SetScreen(channelID, peerID string, gen uint64, s Screen) bool
	SetUpdate(channelID, peerID string, u UpdateState) bool
	SetBusy(channelID, peerID string, b BusyState) bool
	SetSettings(channelID, peerID string, version int64, errText string) bool
	SetTags(channelID, peerID string, tags map[string]string) bool
	SetHealth(channelID, peerID string, gen uint64, h link.Health) error
	HealthCounts(channelID string) map[string]int
	HealthByTag(channelID string, keys []string, maxValues int) []HealthTagCount
	Changed(channelID, peerID string)
	Get(channelID, peerID string) (Peer, bool)
	Page(channelID string, f Filter, after string, limit int) (peers []Peer, next string)
	List(channelID string, f Filter) []Peer
	Count(channelID string) int
	Online(channelID string, maxTags int) (total int, byTag map[string]int)
	Subscribe(channelID string, buf int) *fanout.Sub[Peer]
	Close() error
}

var _ Devices = (*Registry)(nil)

// View is a set of peers kept by someone else, put into it whole: a
// cluster's mirror of the devices every edge holds (package cluster). It
// answers the registry's reads (Get, Page, List, Count, Online,
// Subscribe) as a Registry does, with the same paging and counting; what
// it holds is bounded by whoever feeds it. Safe for concurrent use.
type View struct {
	noticesPending func(channelID, peerID string) int
	now            func() time.Time

	mu       sync.Mutex
	channels map[string]*viewChannel
}

type viewChannel struct {
	peers map[string]Peer
	ids   []string // sorted; nil when it must be rebuilt
	live  fanout.Hub[Peer]
}

// NewView returns an empty view. noticesPending (nil: 0) fills each
// peer's notices_pending when it is read; it is called with the view's
// lock held and must not call back into it.
func NewView(noticesPending func(channelID, peerID string) int) *View {
	return &View{noticesPending: noticesPending, now: time.Now, channels: map[string]*viewChannel{}}
}

func (v *View) channel(id string) *viewChannel {
	vc := v.channels[id]
	if vc == nil {
		vc = &viewChannel{peers: map[string]Peer{}}
		v.channels[id] = vc
	}
	return vc
}

// Put adds or replaces p (by channel and peer id) and streams it to the
// channel's subscribers.
func (v *View) Put(p Peer) {
	if p.Capabilities == nil {
		p.Capabilities = []string{}
	}
	if p.Tags == nil {
		p.Tags = map[string]string{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	vc := v.channel(p.ChannelID)
	if _, ok := vc.peers[p.PeerID]; !ok {
		vc.ids = nil
	}
	vc.peers[p.PeerID] = p
	if vc.live.Len() > 0 {
		vc.live.Publish(v.readLocked(p, v.now()))
	}
}

// Remove forgets a peer.
func (v *View) Remove(channelID, peerID string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if vc := v.channels[channelID]; vc != nil {
		if _, ok := vc.peers[peerID]; ok {
			delete(vc.peers, peerID)
			vc.ids = nil
		}
	}
}

// Changed streams a peer again (its pending notices changed).
func (v *View) Changed(channelID, peerID string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if vc := v.channels[channelID]; vc != nil && vc.live.Len() > 0 {
		if p, ok := vc.peers[peerID]; ok {
			vc.live.Publish(v.readLocked(p, v.now()))
		}
	}
}

// readLocked is p as a read shows it: last_seen is now while online,
// reconnects_last_hour counted now (when p has its Reconnects),
// notices_pending as the mailboxes count them now.
func (v *View) readLocked(p Peer, now time.Time) Peer {
	if p.Online {
		p.LastSeen = formatTime(now)
	}
	if p.Reconnects != nil {
		p.ReconnectsLastHour = reconnectsLastHour(p.Reconnects, now)
	}
	if v.noticesPending != nil {
		p.NoticesPending = v.noticesPending(p.ChannelID, p.PeerID)
	}
	return p
}

// Offline is p as a read shows it once its connection is gone without a
// disconnect (the node that held it is no longer heard from), as a
// disconnect shows it: offline, last seen at seen, without
// connected_since, screen or busy.
func (p Peer) Offline(seen time.Time) Peer {
	p.Online, p.ConnectedSince, p.Screen, p.Busy = false, nil, nil, nil
	p.LastSeen = formatTime(seen)
	return p
}

// Get returns one peer.
func (v *View) Get(channelID, peerID string) (Peer, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if vc := v.channels[channelID]; vc != nil {
		if p, ok := vc.peers[peerID]; ok {
			return v.readLocked(p, v.now()), true
		}
	}
	return Peer{}, false
}

// Page is Registry.Page over the view.
func (v *View) Page(channelID string, f Filter, after string, limit int) (peers []Peer, next string) {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	vc := v.channels[channelID]
	if vc == nil {
		return []Peer{}, ""
	}
	if vc.ids == nil {
		vc.ids = make([]string, 0, len(vc.peers))
		for id := range vc.peers {
			vc.ids = append(vc.ids, id)
		}
		sort.Strings(vc.ids)
	}
	return pageOf(vc.ids, after, limit, func(id string) (Peer, bool) {
		p := vc.peers[id]
		if !f.matches(p.Online, p.Tags) {
			return Peer{}, false
		}
		return v.readLocked(p, now), true
	})
}

// List is every peer f selects, in peer id order.
func (v *View) List(channelID string, f Filter) []Peer {
	out, _ := v.Page(channelID, f, "", 0)
	return out
}

// Count is how many peers the channel holds.
func (v *View) Count(channelID string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if vc := v.channels[channelID]; vc != nil {
		return len(vc.peers)
	}
	return 0
}

// Online is Registry.Online over the view.
func (v *View) Online(channelID string, maxTags int) (total int, byTag map[string]int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var c onlineCounter
	if vc := v.channels[channelID]; vc != nil {
		for _, p := range vc.peers {
			c.add(maxTags, p.Online, p.Authenticated, p.Tags)
		}
	}
	return c.total, c.tags()
}

// Subscribe streams every peer put into the channel (or Changed), to a
// subscriber that may fall buf changes behind before it is dropped.
func (v *View) Subscribe(channelID string, buf int) *fanout.Sub[Peer] {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.channel(channelID).live.Subscribe(buf)
}
