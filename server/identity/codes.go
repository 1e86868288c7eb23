package identity

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"sync"
	"time"

	"termlink/link/enroll"
	"termlink/server/config"
)

// The limits of pending pairing codes (the routes' are in enroll.go).
const (
	PollInterval     = 2    // seconds between a device's polls
	IdlePolls        = 3    // a code not polled for this many intervals is dropped
	MaxPending       = 1000 // codes waiting, all networks
	MaxPendingPerNet = 16   // codes waiting from one /24 or /64
	slowDownStep     = 5 * time.Second
	maxDropped       = 2048 // dropped device codes remembered
)

// Pending is one pairing code asked for and not yet collected.
type Pending struct {
	Code, ChannelID   string
	DeviceDigest      config.Digest // of the device code, the device's secret handle
	PeerID, Name      string        // suggested by the device; set by the approval
	Remote            string
	Network           netip.Prefix // sourceNet(Remote)
	Requested, Expiry time.Time
	LastPoll          time.Time     // Requested until the first poll
	Polled            bool          // LastPoll is a poll
	Interval          time.Duration // grows by slowDownStep with each slow_down
	Approved          bool
	ApprovedBy        string
	Token             string // from approval until the device collects it
}

// idleAfter is how long p may go unpolled before it is dropped.
func (p *Pending) idleAfter() time.Duration { return IdlePolls * p.Interval }

// DropDue reports whether p is to be dropped at now, and why: expired,
// or unapproved and not polled for IdlePolls intervals (an approved code
// waits for its device until it expires: its token is bound already).
// Every Codes sweeps by it.
func (p *Pending) DropDue(now time.Time) (Drop, bool) {
	switch {
	case now.After(p.Expiry):
		return DropExpired, true
	case !p.Approved && now.Sub(p.LastPoll) > p.idleAfter():
		return DropAbandoned, true
	}
	return 0, false
}

// NotePoll records a poll at now; fast is a poll sooner than half the
// interval after the last one (RFC 8628 section 3.5: the caller answers
// slow_down, SlowDown, unless the code is approved).
func (p *Pending) NotePoll(now time.Time) (fast bool, since time.Duration) {
	since = now.Sub(p.LastPoll)
	fast = p.Polled && since < p.Interval/2
	p.LastPoll, p.Polled = now, true
	return fast, since
}

// SlowDown grows p's interval after a fast poll.
func (p *Pending) SlowDown() { p.Interval += slowDownStep }

// Drop is why a code left before its device collected its token.
type Drop int

const (
	DropCollected Drop = iota // the token was handed over: no answer kept
	DropExpired
	DropAbandoned
	DropEvicted
	DropDenied
)

// Codes is the pending pairing codes of every channel. LocalCodes keeps
// them in memory; a JetStream implementation lets a code asked for
// through one edge be approved on another. Every method takes the time
// (the caller's clock) and first drops what expired, and unapproved codes
// whose device stopped polling.
type Codes interface {
	// Start adds p (its Code empty) under a new pairing code, unless
	// p.Network holds MaxPendingPerNet codes (*NetFullError) or all
	// MaxPending are taken and no network holds more than p.Network
	// (ErrFull); at the cap the oldest unapproved code of the network
	// holding the most is dropped (evicted) to make room.
	Start(p Pending, now time.Time) (code string, evicted *Pending, err error)
	// Poll is a device's poll with the device code of digest device on
	// channelID: an approved code hands over its token once.
	Poll(channelID string, device config.Digest, now time.Time) PollResult
	// List is a copy of every pending code.
	List(now time.Time) []Pending
	// Approve calls approve with pending code's copy, then marks it
	// approved by the Approval approve returns (nothing changes when it
	// returns an error, which Approve returns). A code not pending is a
	// *NotPendingError, an approved one an *ApprovedError.
	Approve(code string, now time.Time, approve func(Pending) (Approval, error)) (Pending, error)
	// Deny drops a pending code, not approved; its device's next poll
	// answers access_denied. Errors as Approve's.
	Deny(code string, now time.Time) (Pending, error)
}

// Approval is what an operator's approval gave a code.
type Approval struct {
	PeerID, Token, By string
}

// PollOutcome is what a poll found.
type PollOutcome int

const (
	PollUnknown  PollOutcome = iota // no such device code on the channel
	PollDropped                     // the code left (Dropped says why)
	PollToken                       // approved: the token is in Pending, handed over now
	PollSlowDown                    // polled faster than half its interval (RFC 8628 section 3.5)
	PollWaiting                     // not approved yet
)

// PollResult is a poll's answer.
type PollResult struct {
	Outcome PollOutcome
	Dropped Drop
	Pending Pending       // PollToken, PollWaiting: the code
	Since   time.Duration // PollSlowDown: since the last poll
}

// ErrFull is Start's answer when every code is taken.
var ErrFull = errors.New("every pairing code is taken")

// NetFullError is Start's answer when the network holds its share.
type NetFullError struct{ N int }

func (e *NetFullError) Error() string {
	return fmt.Sprintf("%d pairing codes from the network are waiting for approval already", e.N)
}

// NotPendingError is a code that is not pending: Gone when it was
// dropped lately, for Why.
type NotPendingError struct {
	Code string
	Gone bool
	Why  Drop
}

// ErrInProgress is wrapped by the error of an Approve or Deny of a code
// another node is approving right now (a shared store's answer): the
// operator looks again in a moment.
var ErrInProgress = errors.New("in progress elsewhere")

func (e *NotPendingError) Error() string { return "no pending pairing code " + e.Code }

// ApprovedError is a code approved already.
type ApprovedError struct{ Pending Pending }

func (e *ApprovedError) Error() string {
	return "pairing code " + e.Pending.Code + " is approved already"
}

// droppedRef is a dropped code in the ring of those remembered.
type droppedRef struct {
	deviceDigest config.Digest
	code         string
}

// LocalCodes is Codes in memory.
type LocalCodes struct {
	mu       sync.Mutex
	byCode   map[string]*Pending
	byDevice map[config.Digest]*Pending
	perNet   map[netip.Prefix]int // codes in byCode per source network
	// dropped and droppedCodes remember why recent codes left, by device
	// code and by pairing code (a ring of maxDropped).
	dropped      map[config.Digest]Drop
	droppedCodes map[string]Drop
	droppedRing  []droppedRef
	droppedNext  int
}

var _ Codes = (*LocalCodes)(nil)

// NewLocalCodes returns an empty LocalCodes.
func NewLocalCodes() *LocalCodes {
	return &LocalCodes{byCode: map[string]*Pending{}, byDevice: map[config.Digest]*Pending{}, perNet: map[netip.Prefix]int{},
		dropped: map[config.Digest]Drop{}, droppedCodes: map[string]Drop{}, droppedRing: make([]droppedRef, 0, maxDropped)}
}

// sweepLocked drops what expired, and unapproved codes whose device
// stopped polling. (An approved code waits for its device until it
// expires: its token is bound already.)
func (e *LocalCodes) sweepLocked(now time.Time) {
	for _, p := range e.byCode {
		if why, due := p.DropDue(now); due {
			e.dropLocked(p, why)
		}
	}
}

func (e *LocalCodes) addLocked(p *Pending) {
	e.byCode[p.Code], e.byDevice[p.DeviceDigest] = p, p
	e.perNet[p.Network]++
}

func (e *LocalCodes) dropLocked(p *Pending, why Drop) {
	if e.byCode[p.Code] != p {
		return
	}
	delete(e.byCode, p.Code)
	delete(e.byDevice, p.DeviceDigest)
	if e.perNet[p.Network]--; e.perNet[p.Network] <= 0 {
		delete(e.perNet, p.Network)
	}
	if why == DropCollected {
		return
	}
	p.Token = ""
	if len(e.droppedRing) < maxDropped {
		e.droppedRing = append(e.droppedRing, droppedRef{p.DeviceDigest, p.Code})
	} else {
		old := e.droppedRing[e.droppedNext]
		delete(e.dropped, old.deviceDigest)
		delete(e.droppedCodes, old.code)
		e.droppedRing[e.droppedNext] = droppedRef{p.DeviceDigest, p.Code}
		e.droppedNext = (e.droppedNext + 1) % maxDropped
	}
	e.dropped[p.DeviceDigest], e.droppedCodes[p.Code] = why, why
}

// Victim returns the code to drop so that network may have one while
// all MaxPending are taken: the oldest unapproved code of the network
// holding the most, if that is more than network holds; else nil.
// perNet counts the pending codes by network. Every Codes evicts by it.
func Victim(pending iter.Seq[*Pending], perNet map[netip.Prefix]int, network netip.Prefix) *Pending {
	mine := perNet[network]
	var victim *Pending
	for p := range pending {
		n := perNet[p.Network]
		if p.Approved || n <= mine {
			continue
		}
		if victim == nil || n > perNet[victim.Network] || n == perNet[victim.Network] && p.Requested.Before(victim.Requested) {
			victim = p
		}
	}
	return victim
}

// Start implements Codes.
func (e *LocalCodes) Start(p Pending, now time.Time) (string, *Pending, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sweepLocked(now)
	if n := e.perNet[p.Network]; n >= MaxPendingPerNet {
		return "", nil, &NetFullError{N: n}
	}
	var evicted *Pending
	if len(e.byCode) >= MaxPending {
		victim := Victim(maps.Values(e.byCode), e.perNet, p.Network)
		if victim == nil {
			return "", nil, ErrFull
		}
		e.dropLocked(victim, DropEvicted)
		v := *victim
		evicted = &v
	}
	var code string
	for code == "" || e.byCode[code] != nil {
		var err error
		if code, err = enroll.NewCode(); err != nil {
			return "", evicted, err
		}
	}
	p.Code = code
	e.addLocked(&p)
	return code, evicted, nil
}

// Poll implements Codes.
func (e *LocalCodes) Poll(channelID string, device config.Digest, now time.Time) PollResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sweepLocked(now)
	p := e.byDevice[device]
	if p == nil || p.ChannelID != channelID {
		if why, gone := e.dropped[device]; gone {
			return PollResult{Outcome: PollDropped, Dropped: why}
		}
		return PollResult{Outcome: PollUnknown}
	}
	fast, since := p.NotePoll(now)
	switch {
	case p.Approved:
		e.dropLocked(p, DropCollected) // single use: the token is handed over once
		res := PollResult{Outcome: PollToken, Pending: *p}
		p.Token = ""
		return res
	case fast: // this code's own limit (RFC 8628 section 3.5)
		p.SlowDown()
		return PollResult{Outcome: PollSlowDown, Pending: *p, Since: since}
	}
	return PollResult{Outcome: PollWaiting, Pending: *p}
}

// List implements Codes.
func (e *LocalCodes) List(now time.Time) []Pending {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sweepLocked(now)
	out := make([]Pending, 0, len(e.byCode))
	for _, p := range e.byCode {
		out = append(out, *p)
	}
	return out
}

// pendingLocked sweeps, then returns code's pending entry, or the error
// saying why it has none.
func (e *LocalCodes) pendingLocked(code string, now time.Time) (*Pending, error) {
	e.sweepLocked(now)
	p := e.byCode[code]
	switch {
	case p == nil:
		why, gone := e.droppedCodes[code]
		return nil, &NotPendingError{Code: code, Gone: gone, Why: why}
	case p.Approved:
		return nil, &ApprovedError{Pending: *p}
	}
	return p, nil
}

// Approve implements Codes.
func (e *LocalCodes) Approve(code string, now time.Time, approve func(Pending) (Approval, error)) (Pending, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := e.pendingLocked(code, now)
	if err != nil {
		return Pending{}, err
	}
	a, err := approve(*p)
	if err != nil {
		return *p, err
	}
	p.Approved, p.PeerID, p.Token, p.ApprovedBy = true, a.PeerID, a.Token, a.By
	return *p, nil
}

// Deny implements Codes.
func (e *LocalCodes) Deny(code string, now time.Time) (Pending, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := e.pendingLocked(code, now)
	if err != nil {
		return Pending{}, err
	}
	e.dropLocked(p, DropDenied)
	return *p, nil
}
