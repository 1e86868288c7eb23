package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/identity"
)

// Buckets of the pending pairing codes (identity.Codes), in memory on
// the NATS nodes (replicated as the other buckets): a code lives minutes,
// and holds its device's token from approval until the device collects
// it, which no disk should keep. A restart of the whole NATS cluster
// forgets them: the devices ask for new codes.
const (
	CodesBucket   = "termlink_codes"
	DroppedBucket = "termlink_codes_dropped"
)

// Keys of CodesBucket:
//
//	p.<code>          a pending code (codeRecord, JSON)
//	d.<device digest> the code of a device code (hex of its SHA-256)
//	starts            bumped by each Start (compare-and-set): two Starts
//	                  decided on the same codes cannot both write, so the
//	                  caps hold across nodes
//
// and of DroppedBucket, why a code left before its token was collected
// (identity.Drop): c.<code> and d.<device digest>.
const (
	startsKey = "starts"

	// codesMaxAge is a backstop only: a code leaves by the caller's clock
	// (identity.Pending.DropDue) at its expiry, at most an hour.
	codesMaxAge = 2 * time.Hour
	// droppedMaxAge is how long a dropped code is remembered (LocalCodes
	// remembers the last 2,048), and droppedMaxBytes its bound.
	droppedMaxAge   = time.Hour
	droppedMaxBytes = 8 << 20
	// approveLease is how long an approval in progress on one node keeps
	// the code from another approval or a denial.
	approveLease = 30 * time.Second
	codeTries    = 16
)

// codeRecord is a pending code as the bucket holds it.
type codeRecord struct {
	identity.Pending
	// Approving: an approval is in progress (until then), the binding
	// being made; another approval or a denial waits.
	Approving time.Time `json:"approving,omitzero"`
}

func (r *codeRecord) approving(now time.Time) bool { return now.Before(r.Approving) }

// CodesOptions configure Node.Codes.
type CodesOptions struct {
	// MaxPending and MaxPendingPerNet: 0 is identity's (tests take fewer).
	MaxPending, MaxPendingPerNet int
}

// Codes is identity.Codes shared by every node of the cluster: a code
// asked for through one edge is approved on any node and collected
// through any edge. Each method reads from the streams' leaders, decides
// by identity's rules and writes with compare-and-set, reading again when
// another node wrote first.
type Codes struct {
	n             *Node
	total, perNet int
	log           *slog.Logger

	mu          sync.Mutex
	kv, dropped jetstream.KeyValue // nil until open succeeds
}

var _ identity.Codes = (*Codes)(nil)

// Codes returns the cluster's pending codes. Their buckets are created
// (if this is the first node to ask) by Open, or by the first call that
// needs them.
func (n *Node) Codes(opt CodesOptions) *Codes {
	c := &Codes{n: n, total: opt.MaxPending, perNet: opt.MaxPendingPerNet, log: n.log}
	if c.total <= 0 {
		c.total = identity.MaxPending
	}
	if c.perNet <= 0 {
		c.perNet = identity.MaxPendingPerNet
	}
	return c
}

// Open creates or updates the buckets.
func (c *Codes) Open(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kv != nil {
		return nil
	}
	kv, err := c.n.identityBucket(ctx, jetstream.KeyValueConfig{Bucket: CodesBucket,
		Description: "termlink: pending pairing codes", TTL: codesMaxAge, Storage: jetstream.MemoryStorage})
	if err != nil {
		return err
	}
	dropped, err := c.n.identityBucket(ctx, jetstream.KeyValueConfig{Bucket: DroppedBucket,
		Description: "termlink: pairing codes dropped lately, and why", TTL: droppedMaxAge, MaxBytes: droppedMaxBytes, Storage: jetstream.MemoryStorage})
	if err != nil {
		return err
	}
	c.kv, c.dropped = kv, dropped
	return nil
}

// opCtx is one call's context, and the buckets open.
func (c *Codes) opCtx() (context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	if err := c.Open(ctx); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

func codeKey(code string) string        { return "p." + code }
func deviceKey(d config.Digest) string  { return "d." + hex.EncodeToString(d[:]) }
func droppedCodeKey(code string) string { return "c." + code }
func validCode(code string) bool {
	for _, r := range code {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return code != ""
}

// get reads code's record; rev 0: none.
func (c *Codes) get(ctx context.Context, code string) (*codeRecord, uint64, error) {
	data, rev, err := c.n.kvGet(ctx, c.kv, codeKey(code))
	if err != nil || rev == 0 {
		return nil, 0, err
	}
	var r codeRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, 0, fmt.Errorf("pairing code %s: %w", code, err)
	}
	return &r, rev, nil
}

func (c *Codes) put(ctx context.Context, r *codeRecord, rev uint64) (uint64, error) {
	v, _ := json.Marshal(r)
	return kvWrite(ctx, c.kv, codeKey(r.Code), v, rev)
}

// droppedWhy is why key (of DroppedBucket) left, if remembered.
func (c *Codes) droppedWhy(ctx context.Context, key string) (identity.Drop, bool) {
	data, rev, err := c.n.kvGet(ctx, c.dropped, key)
	if err != nil || rev == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(data))
	return identity.Drop(n), err == nil
}

// drop removes r (read at rev) for why; ErrConflict when it changed
// since. A code dropped before its token was collected is remembered.
func (c *Codes) drop(ctx context.Context, r *codeRecord, rev uint64, why identity.Drop) error {
	if err := kvDelete(ctx, c.kv, codeKey(r.Code), rev); err != nil {
		return err
	}
	_ = kvDelete(ctx, c.kv, deviceKey(r.DeviceDigest), 0)
	if why == identity.DropCollected {
		return nil
	}
	v := []byte(strconv.Itoa(int(why)))
	for _, key := range []string{droppedCodeKey(r.Code), deviceKey(r.DeviceDigest)} {
		if _, err := c.dropped.Put(ctx, key, v); err != nil {
			c.log.Warn("cluster: a dropped pairing code not remembered (its device is told invalid_grant)", "err", err)
		}
	}
	return nil
}

// entry is a record with its revision.
type codeEntry struct {
	r   *codeRecord
	rev uint64
}

// sweep reads every pending code and drops those due at now (not while
// an approval is in progress); ErrConflict when one changed meanwhile.
func (c *Codes) sweep(ctx context.Context, now time.Time) ([]codeEntry, error) {
	entries, err := watchAll(ctx, c.kv, "p.>")
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the pairing codes: %w", err)
	}
	out := make([]codeEntry, 0, len(entries))
	for _, e := range entries {
		r := new(codeRecord)
		if err := json.Unmarshal(e.Value(), r); err != nil {
			c.log.Warn("cluster: a pairing code that does not read; dropped", "key", e.Key(), "err", err)
			_ = kvDelete(ctx, c.kv, e.Key(), e.Revision())
			continue
		}
		if why, due := r.DropDue(now); due && !r.approving(now) {
			if err := c.drop(ctx, r, e.Revision(), why); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, codeEntry{r, e.Revision()})
	}
	return out, nil
}

// Start implements identity.Codes. Every pending code is read (the caps
// count them), and the start counter written last at the revision read
// first: a Start that another node's Start overtook undoes its code and
// decides again.
func (c *Codes) Start(p identity.Pending, now time.Time) (string, *identity.Pending, error) {
	ctx, cancel, err := c.opCtx()
	if err != nil {
		return "", nil, err
	}
	defer cancel()
	var evicted *identity.Pending
	for range codeTries {
		_, startsRev, err := c.n.kvGet(ctx, c.kv, startsKey)
		if err != nil {
			return "", evicted, fmt.Errorf("cluster: reading the pairing codes: %w", err)
		}
		live, err := c.sweep(ctx, now)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return "", evicted, err
		}
		perNet, taken := map[netip.Prefix]int{}, map[string]*codeEntry{}
		for i := range live {
			perNet[live[i].r.Network]++
			taken[live[i].r.Code] = &live[i]
		}
		if n := perNet[p.Network]; n >= c.perNet {
			return "", evicted, &identity.NetFullError{N: n}
		}
		var victim *codeEntry
		if len(live) >= c.total {
			v := identity.Victim(func(yield func(*identity.Pending) bool) {
				for i := range live {
					if !yield(&live[i].r.Pending) {
						return
					}
				}
			}, perNet, p.Network)
			if v == nil {
				return "", evicted, identity.ErrFull
			}
			victim = taken[v.Code]
		}
		rec := &codeRecord{Pending: p}
		for rec.Code == "" || taken[rec.Code] != nil {
			if rec.Code, err = enroll.NewCode(); err != nil {
				return "", evicted, err
			}
		}
		if _, err := c.put(ctx, rec, 0); errors.Is(err, ErrConflict) {
			continue // the code was taken meanwhile
		} else if err != nil {
			return "", evicted, fmt.Errorf("cluster: writing the pairing code: %w", err)
		}
		if _, err := c.kv.Put(ctx, deviceKey(p.DeviceDigest), []byte(rec.Code)); err != nil {
			c.undoStart(ctx, rec)
			return "", evicted, fmt.Errorf("cluster: writing the pairing code: %w", err)
		}
		if victim != nil {
			if err := c.drop(ctx, victim.r, victim.rev, identity.DropEvicted); err != nil {
				c.undoStart(ctx, rec)
				if errors.Is(err, ErrConflict) {
					continue
				}
				return "", evicted, fmt.Errorf("cluster: dropping a pairing code: %w", err)
			}
			v := victim.r.Pending
			v.Token = ""
			evicted = &v
		}
		if _, err := kvWrite(ctx, c.kv, startsKey, []byte(rec.Code), startsRev); err != nil {
			c.undoStart(ctx, rec)
			if errors.Is(err, ErrConflict) {
				continue
			}
			return "", evicted, fmt.Errorf("cluster: writing the pairing code: %w", err)
		}
		return rec.Code, evicted, nil
	}
	return "", evicted, errors.New("cluster: the pairing codes kept changing (many asked for at once); try again")
}

// undoStart removes a code its Start did not commit (never handed out).
func (c *Codes) undoStart(ctx context.Context, rec *codeRecord) {
	_ = kvDelete(ctx, c.kv, deviceKey(rec.DeviceDigest), 0)
	_ = c.kv.Purge(ctx, codeKey(rec.Code))
}

// Poll implements identity.Codes: an approved code is deleted at the
// revision read, so exactly one poll, on whichever edge, hands its token
// over. A poll that cannot reach the store answers "waiting" (the device
// polls again).
func (c *Codes) Poll(channelID string, device config.Digest, now time.Time) identity.PollResult {
	ctx, cancel, err := c.opCtx()
	if err != nil {
		c.log.Warn("cluster: a device's poll of its pairing code not answered from the store; told to wait", "channel_id", channelID, "err", err)
		return identity.PollResult{Outcome: identity.PollWaiting}
	}
	defer cancel()
	unknown := func() identity.PollResult {
		if why, gone := c.droppedWhy(ctx, deviceKey(device)); gone {
			return identity.PollResult{Outcome: identity.PollDropped, Dropped: why}
		}
		return identity.PollResult{Outcome: identity.PollUnknown}
	}
	for range codeTries {
		code, rev, err := c.n.kvGet(ctx, c.kv, deviceKey(device))
		if err != nil {
			break
		}
		if rev == 0 {
			return unknown()
		}
		r, rev, err := c.get(ctx, string(code))
		if err != nil {
			break
		}
		if r == nil || r.ChannelID != channelID {
			return unknown()
		}
		if why, due := r.DropDue(now); due && !r.approving(now) {
			if err := c.drop(ctx, r, rev, why); err != nil {
				continue
			}
			return identity.PollResult{Outcome: identity.PollDropped, Dropped: why}
		}
		fast, since := r.NotePoll(now)
		if r.Approved {
			if err := c.drop(ctx, r, rev, identity.DropCollected); err != nil {
				continue // another poll or a sweep came first: read again
			}
			return identity.PollResult{Outcome: identity.PollToken, Pending: r.Pending}
		}
		if fast {
			r.SlowDown()
		}
		if _, err := c.put(ctx, r, rev); err != nil {
			continue
		}
		p := r.Pending
		if fast {
			return identity.PollResult{Outcome: identity.PollSlowDown, Pending: p, Since: since}
		}
		return identity.PollResult{Outcome: identity.PollWaiting, Pending: p}
	}
	c.log.Warn("cluster: a device's poll of its pairing code not answered from the store; told to wait", "channel_id", channelID)
	return identity.PollResult{Outcome: identity.PollWaiting}
}

// List implements identity.Codes.
func (c *Codes) List(now time.Time) []identity.Pending {
	ctx, cancel, err := c.opCtx()
	if err != nil {
		c.log.Error("cluster: listing the pairing codes", "err", err)
		return nil
	}
	defer cancel()
	for range codeTries {
		live, err := c.sweep(ctx, now)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			c.log.Error("cluster: listing the pairing codes", "err", err)
			return nil
		}
		out := make([]identity.Pending, 0, len(live))
		for _, e := range live {
			p := e.r.Pending
			p.Token = ""
			out = append(out, p)
		}
		return out
	}
	return nil
}

// errApproving is the answer while another node approves the code.
type errApproving struct{ code string }

func (e errApproving) Error() string {
	return "pairing code " + e.code + " is being approved on another node; look again in a moment"
}

// Unwrap makes it identity.ErrInProgress (the routes answer 409).
func (e errApproving) Unwrap() error { return identity.ErrInProgress }

// pending reads code's record for an operator: the error says why it is
// not pending (identity's errors) or is being approved.
func (c *Codes) pending(ctx context.Context, code string, now time.Time) (*codeRecord, uint64, error) {
	if !validCode(code) {
		return nil, 0, &identity.NotPendingError{Code: code}
	}
	for range codeTries {
		r, rev, err := c.get(ctx, code)
		if err != nil {
			return nil, 0, fmt.Errorf("cluster: reading the pairing code: %w", err)
		}
		if r != nil && !r.approving(now) {
			if why, due := r.DropDue(now); due {
				if err := c.drop(ctx, r, rev, why); errors.Is(err, ErrConflict) {
					continue
				} else if err != nil {
					return nil, 0, fmt.Errorf("cluster: dropping the pairing code: %w", err)
				}
				r = nil
			}
		}
		switch {
		case r == nil:
			why, gone := c.droppedWhy(ctx, droppedCodeKey(code))
			return nil, 0, &identity.NotPendingError{Code: code, Gone: gone, Why: why}
		case r.Approved:
			p := r.Pending
			p.Token = ""
			return nil, 0, &identity.ApprovedError{Pending: p}
		case r.approving(now):
			return nil, 0, errApproving{code}
		}
		return r, rev, nil
	}
	return nil, 0, errors.New("cluster: the pairing code kept changing; try again")
}

// Approve implements identity.Codes: the code is marked as being
// approved (compare-and-set) before approve runs, so two nodes never
// both bind a token for it; then the approval is written over whatever
// polls changed meanwhile.
func (c *Codes) Approve(code string, now time.Time, approve func(identity.Pending) (identity.Approval, error)) (identity.Pending, error) {
	ctx, cancel, err := c.opCtx()
	if err != nil {
		return identity.Pending{}, err
	}
	defer cancel()
	var r *codeRecord
	for try := 0; ; try++ {
		var rev uint64
		var err error
		if r, rev, err = c.pending(ctx, code, now); err != nil {
			return identity.Pending{}, err
		}
		r.Approving = now.Add(approveLease)
		if _, err = c.put(ctx, r, rev); err == nil {
			break
		}
		if !errors.Is(err, ErrConflict) || try == codeTries {
			return identity.Pending{}, fmt.Errorf("cluster: marking the pairing code: %w", err)
		}
	}
	mark := r.Approving
	a, err := approve(r.Pending)
	// Write the outcome on the record as it is now (a poll may have
	// changed it), if the mark is still this approval's.
	for range codeTries {
		cur, rev, gerr := c.get(ctx, code)
		if gerr != nil || cur == nil || !cur.Approving.Equal(mark) {
			break
		}
		cur.Approving = time.Time{}
		if err == nil {
			cur.Approved, cur.PeerID, cur.Token, cur.ApprovedBy = true, a.PeerID, a.Token, a.By
		}
		if _, werr := c.put(ctx, cur, rev); werr == nil {
			p := cur.Pending
			p.Token = ""
			return p, err
		} else if !errors.Is(werr, ErrConflict) {
			break
		}
	}
	if err != nil {
		return r.Pending, err
	}
	c.log.Error("cluster: an approved pairing code could not be marked approved; its device will not get the token (reset the peer's binding and ask again)",
		"code", code, "peer_id", a.PeerID)
	return identity.Pending{}, fmt.Errorf("cluster: pairing code %s was approved but the approval not kept; reset peer_id %s's binding and have the device ask again", code, a.PeerID)
}

// Deny implements identity.Codes.
func (c *Codes) Deny(code string, now time.Time) (identity.Pending, error) {
	ctx, cancel, err := c.opCtx()
	if err != nil {
		return identity.Pending{}, err
	}
	defer cancel()
	for range codeTries {
		r, rev, err := c.pending(ctx, code, now)
		if err != nil {
			return identity.Pending{}, err
		}
		if err := c.drop(ctx, r, rev, identity.DropDenied); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return identity.Pending{}, fmt.Errorf("cluster: dropping the pairing code: %w", err)
		}
		return r.Pending, nil
	}
	return identity.Pending{}, errors.New("cluster: the pairing code kept changing; try again")
}
