package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/link"
	"termlink/server/fanout"
	"termlink/server/registry"
)

// The device registry across the cluster (issue 25): every edge keeps
// its own registry (package registry: authoritative for the devices it
// holds, their budgets, its workspace's copy) and publishes each peer
// that changed, written behind and coalesced, to KV termlink_devices;
// every node keeps a mirror of that bucket, fed by a watch, and answers
// the registry's reads from it (registry.View). A peer shows online only
// while the edge run that published it is alive: each edge beats in the
// same bucket with its run (a random id per process), so an edge killed
// and restarted under its name does not revive the connections it lost.

// DevicesBucket holds every edge's devices and the edges' beats.
const DevicesBucket = "termlink_devices"

// Defaults of DevicesOptions.
const (
	DefaultDevicesFlush        = time.Second
	DefaultDevicesMaxValueSize = 16 << 10  // a device (<= 2 KiB said of itself) with its screen (<= 4 KiB of text)
	DefaultDevicesMaxBytes     = 512 << 20 // the bucket, every channel and edge
	// devicesLastMessageEvery is how often a peer whose only change is a
	// message accepted (its last_message_at) is published again.
	devicesLastMessageEvery = time.Minute
	// devicesRefreshEvery is how often an online peer is published again
	// with no change: a record another edge wrote over by mistake (the
	// edges' clocks disagree) is put right.
	devicesRefreshEvery = 5 * time.Minute
)

// Keys of the bucket:
//
//	p.<channel, base64url>.<peer, base64url>  a devicesRecord
//	e.<edge, base64url>                        an edge's beat (devicesBeat)
const (
	devicesPeerPrefix = "p."
	devicesBeatPrefix = "e."
)

// DevicesOptions tune Devices; zero values take the defaults.
type DevicesOptions struct {
	Flush        time.Duration // how often changed peers are published; default DefaultDevicesFlush
	MaxValueSize int32         // bytes of one peer in the bucket; default DefaultDevicesMaxValueSize
	MaxBytes     int64         // bytes of the bucket; default DefaultDevicesMaxBytes
}

// devicesRecord is one peer as an edge published it.
type devicesRecord struct {
	Edge  string        `json:"edge"`
	Run   string        `json:"run"`   // the edge's process (devicesBeat.Run)
	Since time.Time     `json:"since"` // the connection's start on that edge: the newer one wins
	At    time.Time     `json:"at"`    // published
	Peer  registry.Peer `json:"peer"`
	// Reconnects is Peer.Reconnects (not in its JSON): a node that reads
	// the record counts its reconnects of the last hour as time passes.
	Reconnects [][2]int64 `json:"reconnects,omitempty"`
}

// devicesBeat is an edge's beat: it holds its devices while heard from.
type devicesBeat struct {
	Edge string    `json:"edge"`
	Run  string    `json:"run"`
	At   time.Time `json:"at"`
}

type devKey struct{ channel, peer string }

func (k devKey) String() string {
	return devicesPeerPrefix + keyPart(k.channel) + "." + keyPart(k.peer)
}

// parseDevKey is the inverse of devKey.String.
func parseDevKey(key string) (devKey, bool) {
	rest, ok := strings.CutPrefix(key, devicesPeerPrefix)
	if !ok {
		return devKey{}, false
	}
	c, p, ok := strings.Cut(rest, ".")
	ch, err1 := decodeKeyPart(c)
	peer, err2 := decodeKeyPart(p)
	if !ok || err1 != nil || err2 != nil || ch == "" || peer == "" {
		return devKey{}, false
	}
	return devKey{ch, peer}, true
}

// What the publisher owes a peer.
const (
	pubSoft = 1 // only its last message: with the next publish, or after devicesLastMessageEvery
	pubNow  = 2
)

// Devices is the device registry of a node in cluster mode
// (registry.Devices): the local registry's connection side (Connected,
// Disconnected, MessageAccepted, SetScreen, and what fleet parts write)
// and the cluster's view for every read (Get, Page, List, Count, Online,
// Subscribe). Safe for concurrent use.
type Devices struct {
	n     *Node
	local *registry.Registry
	view  *registry.View
	kv    jetstream.KeyValue
	opt   DevicesOptions
	run   string
	log   *slog.Logger

	kick chan struct{} // a disconnect: publish now

	// The publisher's book (mu).
	mu        sync.Mutex
	owed      map[devKey]uint8
	forgot    map[devKey]struct{}
	since     map[devKey]time.Time // the start of each connection here
	published map[devKey]time.Time
	oversize  map[devKey]bool // logged as too large, until published

	// The mirror (mmu): the bucket as the watch delivered it.
	mmu     sync.Mutex
	records map[devKey]mirrored
	byEdge  map[string]map[devKey]struct{}
	beats   map[string]beatSeen
	alive   map[string]string // per edge, the run shown alive ("" none)
}

var _ registry.Devices = (*Devices)(nil)

type mirrored struct {
	rec devicesRecord
	rev uint64
}

type beatSeen struct {
	run  string
	seen time.Time // when this node heard it
}

// OpenDevices opens the local registry in dir (ropt as registry.Open
// takes them) and the cluster's bucket, and starts this node's mirror,
// its beat (edges) and its publisher; they stop with the node, the
// publisher after a last publish.
func (n *Node) OpenDevices(ctx context.Context, dir string, ropt registry.Options, opt DevicesOptions) (*Devices, error) {
	if opt.Flush <= 0 {
		opt.Flush = DefaultDevicesFlush
	}
	if opt.MaxValueSize <= 0 {
		opt.MaxValueSize = DefaultDevicesMaxValueSize
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultDevicesMaxBytes
	}
	kv, err := n.devicesBucket(ctx, opt)
	if err != nil {
		return nil, err
	}
	var run [8]byte
	_, _ = rand.Read(run[:])
	d := &Devices{n: n, kv: kv, opt: opt, run: hex.EncodeToString(run[:]), log: n.log.With("part", "devices"),
		kick: make(chan struct{}, 1), owed: map[devKey]uint8{}, forgot: map[devKey]struct{}{}, since: map[devKey]time.Time{},
		published: map[devKey]time.Time{}, oversize: map[devKey]bool{},
		records: map[devKey]mirrored{}, byEdge: map[string]map[devKey]struct{}{}, beats: map[string]beatSeen{}, alive: map[string]string{}}
	d.view = registry.NewView(ropt.NoticesPending)
	ropt.Forgot = d.forget
	if d.local, err = registry.Open(dir, ropt); err != nil {
		return nil, err
	}
	n.Go(d.watch)
	n.Go(d.publisher)
	if n.cfg.Edge() {
		n.Go(d.beater)
	}
	return d, nil
}

// devicesBucket creates or updates the bucket, asking again until ctx
// ends: JetStream leaves a create of a stream that another node creates
// at the same moment unanswered (nats.go#949), as at a cluster's start.
func (n *Node) devicesBucket(ctx context.Context, opt DevicesOptions) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{Bucket: DevicesBucket,
		Description: "termlink: every edge's devices (registry) and the edges' beats", Storage: jetstream.FileStorage,
		MaxValueSize: opt.MaxValueSize, MaxBytes: opt.MaxBytes}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := n.identityBucket(actx, cfg)
		cancel()
		if err == nil {
			return kv, nil
		}
		n.log.Warn("cluster: the devices' bucket not made yet; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(min(attempt, 5)) * 200 * time.Millisecond):
		}
	}
}

// Run is this process's run id in its beat and records.
func (d *Devices) Run() string { return d.run }

// Close closes the local registry (the node's close stops the rest).
func (d *Devices) Close() error { return d.local.Close() }

// The connection side: the local registry, then the peer is owed a
// publish.

// Connected implements the adapter's registry (registry.Registry.Connected).
func (d *Devices) Connected(dev registry.Device) (uint64, []string, error) {
	gen, ignored, err := d.local.Connected(dev)
	if err == nil {
		k := devKey{dev.ChannelID, dev.PeerID}
		d.mu.Lock()
		d.since[k] = time.Now()
		d.oweLocked(k, pubNow)
		d.mu.Unlock()
	}
	return gen, ignored, err
}

// Disconnected implements the adapter's registry; the peer is published
// at once.
func (d *Devices) Disconnected(channelID, peerID string, gen uint64) {
	d.local.Disconnected(channelID, peerID, gen)
	d.owe(devKey{channelID, peerID}, pubNow)
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// MessageAccepted implements the adapter's registry.
func (d *Devices) MessageAccepted(channelID, peerID string) {
	d.local.MessageAccepted(channelID, peerID)
	d.owe(devKey{channelID, peerID}, pubSoft)
}

// SetScreen implements the adapter's registry.
func (d *Devices) SetScreen(channelID, peerID string, gen uint64, s registry.Screen) bool {
	ok := d.local.SetScreen(channelID, peerID, gen, s)
	if ok {
		d.owe(devKey{channelID, peerID}, pubNow)
	}
	return ok
}

// SetUpdate implements the fleet side's registry: a device's last update
// state, published at once.
func (d *Devices) SetUpdate(channelID, peerID string, u registry.UpdateState) bool {
	ok := d.local.SetUpdate(channelID, peerID, u)
	if ok {
		d.owe(devKey{channelID, peerID}, pubNow)
	}
	return ok
}

// SetBusy implements the fleet side's registry: whether a device is in
// use (issue 42), published at once.
func (d *Devices) SetBusy(channelID, peerID string, b registry.BusyState) bool {
	ok := d.local.SetBusy(channelID, peerID, b)
	if ok {
		d.owe(devKey{channelID, peerID}, pubNow)
	}
	return ok
}

// SetSettings implements the fleet side's registry: a device's
// settings_ack, published at once.
func (d *Devices) SetSettings(channelID, peerID string, version int64, errText string) bool {
	ok := d.local.SetSettings(channelID, peerID, version, errText)
	if ok {
		d.owe(devKey{channelID, peerID}, pubNow)
	}
	return ok
}

// SetTags implements the fleet side's registry: tags pushed settings
// gave a device, published at once.
func (d *Devices) SetTags(channelID, peerID string, tags map[string]string) bool {
	ok := d.local.SetTags(channelID, peerID, tags)
	if ok {
		d.owe(devKey{channelID, peerID}, pubNow)
	}
	return ok
}

// SetHealth implements the health frame's registry: a device's health
// report, published at once.
func (d *Devices) SetHealth(channelID, peerID string, gen uint64, h link.Health) error {
	err := d.local.SetHealth(channelID, peerID, gen, h)
	if err == nil {
		d.owe(devKey{channelID, peerID}, pubNow)
	}
	return err
}

// HealthCounts counts the cluster's online devices per health condition.
func (d *Devices) HealthCounts(channelID string) map[string]int {
	return d.view.HealthCounts(channelID)
}

// HealthByTag counts the cluster's online devices per health condition
// and value of each tag key in keys (registry.View.HealthByTag).
func (d *Devices) HealthByTag(channelID string, keys []string, maxValues int) []registry.HealthTagCount {
	return d.view.HealthByTag(channelID, keys, maxValues)
}

func (d *Devices) owe(k devKey, what uint8) {
	d.mu.Lock()
	d.oweLocked(k, what)
	d.mu.Unlock()
}

func (d *Devices) oweLocked(k devKey, what uint8) {
	d.owed[k] = max(d.owed[k], what)
	delete(d.forgot, k)
}

// forget is the local registry's Forgot: the peer's record goes too, if
// it is this edge's. Called with the registry's lock held.
func (d *Devices) forget(channelID, peerID string) {
	k := devKey{channelID, peerID}
	d.mu.Lock()
	delete(d.owed, k)
	delete(d.since, k)
	delete(d.published, k)
	delete(d.oversize, k)
	d.forgot[k] = struct{}{}
	d.mu.Unlock()
}

// The reads: the cluster's view.

// Get returns one peer of the cluster.
func (d *Devices) Get(channelID, peerID string) (registry.Peer, bool) {
	return d.view.Get(channelID, peerID)
}

// Page pages the cluster's peers (registry.Registry.Page).
func (d *Devices) Page(channelID string, f registry.Filter, after string, limit int) ([]registry.Peer, string) {
	return d.view.Page(channelID, f, after, limit)
}

// List is every peer of the cluster f selects.
func (d *Devices) List(channelID string, f registry.Filter) []registry.Peer {
	return d.view.List(channelID, f)
}

// Count is how many peers the cluster lists in the channel.
func (d *Devices) Count(channelID string) int { return d.view.Count(channelID) }

// Online counts the cluster's online devices (registry.Registry.Online).
func (d *Devices) Online(channelID string, maxTags int) (int, map[string]int) {
	return d.view.Online(channelID, maxTags)
}

// Subscribe streams the cluster's peers as they change.
func (d *Devices) Subscribe(channelID string, buf int) *fanout.Sub[registry.Peer] {
	return d.view.Subscribe(channelID, buf)
}

// Changed streams a peer again (its pending notices changed).
func (d *Devices) Changed(channelID, peerID string) { d.view.Changed(channelID, peerID) }

// The publisher. Which record of a peer wins when two edges write it
// (mayReplaceLocked) compares the start of their connections on the
// edges' clocks: a skew between them matters only for a device that
// connects to both within it, and a wrong winner is replaced at its
// next publish.

// publisher publishes what is owed every Flush (and at once after a
// disconnect) until the node closes, then what is left.
func (d *Devices) publisher(ctx context.Context) {
	flush := time.NewTicker(d.opt.Flush)
	defer flush.Stop()
	refreshed := time.Now()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			d.publish(last, true)
			cancel()
			return
		case now := <-flush.C:
			if now.Sub(refreshed) >= time.Minute {
				d.refresh(now)
				refreshed = now
			}
		case <-d.kick:
		}
		d.publish(ctx, false)
	}
}

// refresh owes a publish of each peer online here and not published
// for devicesRefreshEvery.
func (d *Devices) refresh(now time.Time) {
	d.mu.Lock()
	var due []devKey
	for k, at := range d.published {
		if now.Sub(at) >= devicesRefreshEvery {
			due = append(due, k)
		}
	}
	d.mu.Unlock()
	for _, k := range due {
		p, ok := d.local.Get(k.channel, k.peer)
		d.mu.Lock()
		switch {
		case ok && p.Online:
			d.oweLocked(k, pubNow)
		case ok:
			d.published[k] = now // offline: nothing to put right until it connects
		default:
			delete(d.published, k) // forgotten
		}
		d.mu.Unlock()
	}
}

// beater publishes this edge's beat every lease/3 (on its own: a slow
// publish must not make the edge look dead) until the node closes, then
// removes it.
func (d *Devices) beater(ctx context.Context) {
	t := time.NewTicker(max(d.n.cfg.Lease/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		d.beat(ctx)
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = d.kv.Delete(last, devicesBeatPrefix+keyPart(d.n.Name()))
			cancel()
			return
		case <-t.C:
		}
	}
}

func (d *Devices) beat(ctx context.Context) {
	b, _ := json.Marshal(devicesBeat{Edge: d.n.Name(), Run: d.run, At: time.Now().UTC()})
	cctx, cancel := context.WithTimeout(ctx, max(d.n.cfg.Lease/3, time.Second))
	defer cancel()
	if _, err := d.kv.Put(cctx, devicesBeatPrefix+keyPart(d.n.Name()), b); err != nil && ctx.Err() == nil {
		d.log.Warn("cluster: the devices' beat not published: other nodes show this edge's devices offline after a lease", "err", err)
	}
}

// publish writes the owed peers as the local registry has them now
// (soft ones only once devicesLastMessageEvery passed, unless all) and
// deletes the forgotten ones.
func (d *Devices) publish(ctx context.Context, all bool) {
	now := time.Now()
	d.mu.Lock()
	var keys []devKey
	for k, what := range d.owed {
		if what == pubSoft && !all && now.Sub(d.published[k]) < devicesLastMessageEvery {
			continue
		}
		keys = append(keys, k)
		delete(d.owed, k)
	}
	forgot := d.forgot
	d.forgot = map[devKey]struct{}{}
	d.mu.Unlock()
	for k := range forgot {
		if err := d.remove(ctx, k); err != nil && ctx.Err() == nil {
			d.log.Warn("cluster: a forgotten device not removed from the cluster's registry", "channel_id", k.channel, "peer_id", k.peer, "err", err)
		}
	}
	// A few writes at a time: keys are independent, and an edge that takes
	// over a dead edge's devices owes them all at once. After a write
	// fails (NATS away, an election) the rest wait for the next publish
	// rather than each for its timeout.
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, devicesWriters)
		failing  atomic.Bool
		failMu   sync.Mutex
		failed   int
		firstErr error
	)
	for _, k := range keys {
		p, ok := d.local.Get(k.channel, k.peer)
		if !ok {
			continue // forgotten meanwhile
		}
		d.mu.Lock()
		since := d.since[k]
		d.mu.Unlock()
		p.NoticesPending, p.Edge = 0, d.n.Name() // counted where it is read
		rec := devicesRecord{Edge: d.n.Name(), Run: d.run, Since: since.UTC(), At: now.UTC(), Peer: p, Reconnects: p.Reconnects}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var err error
			if failing.Load() {
				err = errPublishHeld
			} else if err = d.write(ctx, k, rec); err != nil {
				failing.Store(true)
			}
			d.mu.Lock()
			if err == nil {
				d.published[k] = now
			} else {
				d.oweLocked(k, pubNow) // the next publish tries again
			}
			d.mu.Unlock()
			if err != nil && !errors.Is(err, errPublishHeld) {
				failMu.Lock()
				if failed++; firstErr == nil {
					firstErr = fmt.Errorf("device %s: %w", k.peer, err)
				}
				failMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed > 0 && ctx.Err() == nil {
		d.log.Warn("cluster: devices not published to the cluster's registry; the next publish tries again", "failed", failed, "first_err", firstErr)
	}
}

// errPublishHeld is a write not tried: an earlier one of the same
// publish failed.
var errPublishHeld = errors.New("held for the next publish")

// devicesWriters bounds the writes of one publish in flight at once.
const devicesWriters = 16

// errOversize is a record over the bucket's value size even without
// its screen: not published.
var errOversize = errors.New("over the bucket's value size")

// write publishes rec for k unless the bucket holds a newer connection
// of the peer (mayReplace), with compare-and-set on the revision the
// mirror has, reading again after a conflict.
func (d *Devices) write(ctx context.Context, k devKey, rec devicesRecord) error {
	val, err := d.encode(k, rec)
	if err != nil {
		return nil // logged; nothing to try again
	}
	key := k.String()
	for try := 0; try < bindTries; try++ {
		d.mmu.Lock()
		cur, ok := d.records[k]
		replace := !ok || d.mayReplaceLocked(cur.rec, rec, time.Now())
		d.mmu.Unlock()
		if !replace {
			return nil
		}
		wctx, cancel := withTimeout(ctx)
		_, err := kvWrite(wctx, d.kv, key, val, cur.rev)
		cancel()
		if !errors.Is(err, ErrConflict) {
			return err
		}
		// The mirror is behind: read the key and decide again.
		rctx, cancel := withTimeout(ctx)
		data, rev, err := d.n.kvGet(rctx, d.kv, key)
		cancel()
		if err != nil {
			return err
		}
		d.mmu.Lock()
		var got devicesRecord
		if rev != 0 && json.Unmarshal(data, &got) == nil {
			if m, ok := d.records[k]; !ok || m.rev < rev {
				d.putLocked(k, mirrored{got, rev})
			}
		} else if rev == 0 {
			d.removeLocked(k)
		}
		d.mmu.Unlock()
	}
	return fmt.Errorf("cluster: publishing device %s: %d compare-and-set conflicts in a row", k.peer, bindTries)
}

// encode is rec as stored; a record over MaxValueSize goes without its
// screen, and one still over is refused (errOversize), logged once.
func (d *Devices) encode(k devKey, rec devicesRecord) ([]byte, error) {
	enc := func() []byte {
		var b bytes.Buffer
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		_ = e.Encode(rec)
		return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	val := enc()
	limit := int(d.opt.MaxValueSize)
	if len(val) > limit && rec.Peer.Screen != nil {
		full := len(val)
		rec.Peer.Screen = nil
		val = enc()
		if len(val) <= limit {
			d.logOversize(k, "cluster: a device's screen mirror left out of the cluster's registry: the record is over the bucket's value size",
				"bytes", full, "max_value_size", limit)
			return val, nil
		}
	}
	if len(val) > limit {
		d.logOversize(k, "cluster: a device not published to the cluster's registry: its record is over the bucket's value size (other nodes show what was published before)",
			"bytes", len(val), "max_value_size", limit)
		return nil, errOversize
	}
	d.mu.Lock()
	delete(d.oversize, k)
	d.mu.Unlock()
	return val, nil
}

func (d *Devices) logOversize(k devKey, msg string, args ...any) {
	d.mu.Lock()
	seen := d.oversize[k]
	d.oversize[k] = true
	d.mu.Unlock()
	if !seen {
		d.log.Warn(msg, append([]any{"channel_id", k.channel, "peer_id", k.peer}, args...)...)
	}
}

// mayReplaceLocked decides whether rec (this edge's) replaces cur: this
// edge's own record, or a connection newer than cur's, or an online one
// while cur's edge is gone (mmu held).
func (d *Devices) mayReplaceLocked(cur, rec devicesRecord, now time.Time) bool {
	switch {
	case cur.Edge == rec.Edge:
		return true
	case rec.Since.After(cur.Since):
		return true
	default:
		return rec.Peer.Online && !d.onlineLocked(cur, now)
	}
}

// remove deletes k's record if it is this edge's. The mirror may not
// hold this edge's latest write of it yet (the watch is behind: a peer
// forgotten just after its publish), or hold an older revision: then the
// key is read from the bucket, and the delete made at what it holds.
func (d *Devices) remove(ctx context.Context, k devKey) error {
	d.mmu.Lock()
	cur, ok := d.records[k]
	d.mmu.Unlock()
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	key := k.String()
	rec, rev := cur.rec, cur.rev
	read := !ok || rec.Edge != d.n.Name()
	for try := 0; try < bindTries; try++ {
		if read {
			data, r, err := d.n.kvGet(ctx, d.kv, key)
			if err != nil {
				return err
			}
			if r == 0 {
				return nil // not in the bucket
			}
			rec, rev = devicesRecord{}, r
			if err := json.Unmarshal(data, &rec); err != nil {
				return fmt.Errorf("cluster: device record %s: %w", key, err)
			}
		}
		if rec.Edge != d.n.Name() {
			return nil // another edge's (the peer moved): not this edge's to remove
		}
		err := kvDelete(ctx, d.kv, key, rev)
		if !errors.Is(err, ErrConflict) {
			return err
		}
		read = true
	}
	return fmt.Errorf("cluster: removing device %s: %d compare-and-set conflicts in a row", k.peer, bindTries)
}

// The mirror.

// watch feeds the mirror from the bucket until ctx ends (watching again
// after a failure), and shows an edge's devices offline once its beat
// is older than a lease.
func (d *Devices) watch(ctx context.Context) {
	tick := time.NewTicker(max(d.n.cfg.Lease/4, 10*time.Millisecond))
	defer tick.Stop()
	for ctx.Err() == nil {
		w, err := watchKV(ctx, d.kv, nil)
		if err != nil {
			d.log.Warn("cluster: cannot watch the devices' bucket; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		initial, seen := true, map[devKey]bool{}
	updates:
		for {
			select {
			case <-ctx.Done():
				break updates
			case <-tick.C:
				d.relive(time.Now())
			case e, ok := <-w.Updates():
				if !ok {
					break updates
				}
				if e == nil { // the bucket as it was: what the mirror has beyond it is gone
					if initial {
						d.sweep(seen)
					}
					initial, seen = false, nil
					continue
				}
				if k := d.apply(e, initial); initial && k != (devKey{}) {
					seen[k] = true
				}
			}
		}
		_ = w.Stop()
	}
}

// apply takes one entry of the watch into the mirror; it returns the
// peer it was about, if any.
func (d *Devices) apply(e jetstream.KeyValueEntry, initial bool) devKey {
	key := e.Key()
	now := time.Now()
	d.mmu.Lock()
	defer d.mmu.Unlock()
	if rest, ok := strings.CutPrefix(key, devicesBeatPrefix); ok {
		edge, err := decodeKeyPart(rest)
		if err != nil {
			return devKey{}
		}
		var b devicesBeat
		if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &b) != nil {
			delete(d.beats, edge)
		} else {
			seen := now
			if initial {
				seen = e.Created() // heard before this node watched
			}
			d.beats[edge] = beatSeen{run: b.Run, seen: seen}
		}
		d.reliveEdgeLocked(edge, now)
		return devKey{}
	}
	k, ok := parseDevKey(key)
	if !ok {
		return devKey{}
	}
	if e.Operation() != jetstream.KeyValuePut {
		d.removeLocked(k)
		return k
	}
	var rec devicesRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		d.log.Warn("cluster: an unreadable device record in the cluster's registry ignored", "key", key, "err", err)
		return k
	}
	if m, ok := d.records[k]; ok && m.rev >= e.Revision() {
		return k // this node read it already (a conflict)
	}
	d.putLocked(k, mirrored{rec, e.Revision()})
	return k
}

// sweep removes what the mirror holds beyond seen (deleted while the
// watch was down).
func (d *Devices) sweep(seen map[devKey]bool) {
	d.mmu.Lock()
	defer d.mmu.Unlock()
	for k := range d.records {
		if !seen[k] {
			d.removeLocked(k)
		}
	}
}

func (d *Devices) putLocked(k devKey, m mirrored) {
	if old, ok := d.records[k]; ok && old.rec.Edge != m.rec.Edge {
		delete(d.byEdge[old.rec.Edge], k)
	}
	d.records[k] = m
	if d.byEdge[m.rec.Edge] == nil {
		d.byEdge[m.rec.Edge] = map[devKey]struct{}{}
	}
	d.byEdge[m.rec.Edge][k] = struct{}{}
	// The edge's alive run as of now first: the view shows a peer online
	// by the run alive when it was put, and puts the edge's peers again
	// only when that run changes. A record put while the edge's beat was
	// late (offline), with alive still naming its run, was shown offline
	// until the run changed (never, for an edge that beats on).
	now := time.Now()
	if !d.reliveEdgeLocked(m.rec.Edge, now) {
		d.view.Put(d.peerLocked(m.rec, now))
	}
}

func (d *Devices) removeLocked(k devKey) {
	if old, ok := d.records[k]; ok {
		delete(d.byEdge[old.rec.Edge], k)
		delete(d.records, k)
		d.view.Remove(k.channel, k.peer)
	}
}

// aliveRunLocked is the run of edge that is alive now ("" none): this
// node's own, or the one whose beat is younger than a lease.
func (d *Devices) aliveRunLocked(edge string, now time.Time) string {
	if edge == d.n.Name() {
		return d.run
	}
	if b, ok := d.beats[edge]; ok && now.Sub(b.seen) < d.n.cfg.Lease {
		return b.run
	}
	return ""
}

// onlineLocked reports rec online now: it says so and its edge's run is
// alive.
func (d *Devices) onlineLocked(rec devicesRecord, now time.Time) bool {
	return rec.Peer.Online && rec.Run != "" && rec.Run == d.aliveRunLocked(rec.Edge, now)
}

// peerLocked is rec as the view shows it: offline, without its screen,
// once its edge's run is gone.
func (d *Devices) peerLocked(rec devicesRecord, now time.Time) registry.Peer {
	p := rec.Peer
	p.Edge, p.Reconnects = rec.Edge, rec.Reconnects
	if p.Online && !d.onlineLocked(rec, now) {
		seen := rec.At
		if b, ok := d.beats[rec.Edge]; ok && b.run == rec.Run && b.seen.After(seen) {
			seen = b.seen
		}
		p = p.Offline(seen)
	}
	return p
}

// relive shows again the devices of each edge whose alive run changed.
func (d *Devices) relive(now time.Time) {
	d.mmu.Lock()
	defer d.mmu.Unlock()
	for edge := range d.byEdge {
		d.reliveEdgeLocked(edge, now)
	}
}

// reliveEdgeLocked puts the devices of edge again if its alive run
// changed, and reports whether it did.
func (d *Devices) reliveEdgeLocked(edge string, now time.Time) bool {
	run := d.aliveRunLocked(edge, now)
	if prev, ok := d.alive[edge]; ok && prev == run {
		return false
	}
	d.alive[edge] = run
	for k := range d.byEdge[edge] {
		d.view.Put(d.peerLocked(d.records[k].rec, now))
	}
	return true
}

// decodeKeyPart is the inverse of keyPart: only its spelling of a value
// (base64 would take line breaks and other trailing bits too).
func decodeKeyPart(s string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil && keyPart(string(b)) != s {
		err = fmt.Errorf("key part %q is not in keyPart's spelling", s)
	}
	return string(b), err
}
