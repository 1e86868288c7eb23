package jepsen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Topology names the nodes a schedule may hit.
type Topology struct {
	NATS    []string // n1, n2, n3
	Edges   []string // edge-1, ...
	Workers []string // worker-1, ...
}

// NemesisOptions shape a schedule.
type NemesisOptions struct {
	// Span is how long the faults last in all (default 36 s): every
	// fault heals by then.
	Span time.Duration
	// Lease is the cluster's lease (leaseSeconds): a pause lasts from 1.5
	// to 4 leases, so the paused node's leases expire (default 2 s).
	Lease time.Duration
	// AllowMajority lets NATS faults overlap past a minority of the NATS
	// nodes; each such fault says so in its Note (beyond what JetStream
	// promises). Off: such a fault is not drawn.
	AllowMajority bool
	// Partitions lets the schedule cut nodes off from the network
	// (FaultPartition): only when the nodes run in network namespaces
	// (testrig/bench/jepsen-partition.sh makes them, as root).
	Partitions bool
	// DiskFull lets the schedule fill a NATS node's JetStream store
	// (FaultDiskFull): only when the stores are on size-limited tmpfs
	// mounts (as root).
	DiskFull bool
	// CatchUp is how long a NATS node still counts as faulted after it
	// is back (restarted, continued, reconnected, its disk freed): it
	// has to rejoin its raft groups and catch up before it can stand in
	// for another node's loss, and nats-server's elections take 4-9 s.
	// The minority rule counts it until then (default 10 s; negative:
	// no margin).
	CatchUp time.Duration
}

// Fault is one fault of a schedule: from At (after the schedule's
// start) for Duration, then healed (the node restarted, SIGCONT, put
// back on the network, or its store's filler removed).
type Fault struct {
	Kind     string // FaultKillNATS, FaultKillEdge, FaultKillWorker, FaultPause, FaultPartition, FaultDiskFull
	Node     string
	At       time.Duration
	Duration time.Duration
	// Note is set when the fault takes a majority of the NATS nodes down
	// or away (with the others faulted then): beyond what JetStream
	// promises.
	Note string
}

// End is when the fault heals.
func (f Fault) End() time.Duration { return f.At + f.Duration }

func (f Fault) String() string {
	s := fmt.Sprintf("%5.1fs-%5.1fs %-11s %s", f.At.Seconds(), f.End().Seconds(), f.Kind, f.Node)
	if f.Note != "" {
		s += " (" + f.Note + ")"
	}
	return s
}

// Schedule is a seed's faults, in order of their start.
type Schedule struct {
	Seed   uint64
	Span   time.Duration
	Faults []Fault
}

func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d faults over %v", s.Seed, len(s.Faults), s.Span)
	for _, f := range s.Faults {
		b.WriteString("\n  " + f.String())
	}
	return b.String()
}

// BeyondPromise reports whether a fault of the schedule takes a majority
// of the NATS nodes down (or cuts them off, or fills their disks).
func (s Schedule) BeyondPromise() bool {
	for _, f := range s.Faults {
		if f.Note != "" {
			return true
		}
	}
	return false
}

const beyondNote = "beyond what JetStream promises: a majority of the NATS nodes down or cut off"

// Kinds returns the fault kinds a schedule with opt may draw, in the
// order Generate numbers them.
func (opt NemesisOptions) Kinds() []string {
	k := []string{FaultKillNATS, FaultKillEdge, FaultKillWorker, FaultPause}
	if opt.Partitions {
		k = append(k, FaultPartition)
	}
	if opt.DiskFull {
		k = append(k, FaultDiskFull)
	}
	return k
}

// Generate draws a schedule from seed (a PCG seeded with it): the same
// seed, topology and options give the same schedule. Faults start 1-3 s
// in and then every 2-6 s, each one of
//
//	kill_nats, kill_edge, kill_worker  kill -9 of the node, restarted
//	                                   after 3-10 s
//	pause                              SIGSTOP of any node, SIGCONT after
//	                                   1.5-4 leases
//	partition (opt.Partitions)         any node cut off from the cluster's
//	                                   network, back after 1.5-5 leases
//	disk_full (opt.DiskFull)           a NATS node's store filled up, the
//	                                   filler removed after 3-10 s
//
// A node has one fault at a time; at most one edge and one worker are
// down (or cut off) at once (one of each is always up, so every fault is
// a single node's loss for the devices and agents), and at most a
// minority of the NATS nodes unless AllowMajority (then the fault's Note
// says it is beyond what JetStream promises); a NATS node counts as
// faulted until opt.CatchUp after it is back. Partitions in force at the
// same moment share a side: the nodes cut off together see each other
// and not the rest (a minority: at most one NATS node, one edge, one
// worker).
//
// Without Partitions and DiskFull the draws are those of the four first
// kinds alone: a seed gives the schedule it gave before those existed.
func Generate(seed uint64, topo Topology, opt NemesisOptions) Schedule {
	if opt.Span <= 0 {
		opt.Span = 36 * time.Second
	}
	if opt.Lease <= 0 {
		opt.Lease = 2 * time.Second
	}
	switch {
	case opt.CatchUp == 0:
		opt.CatchUp = 10 * time.Second
	case opt.CatchUp < 0:
		opt.CatchUp = 0
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	s := Schedule{Seed: seed, Span: opt.Span}
	minority := (len(topo.NATS) - 1) / 2
	role := func(node string) string {
		for _, n := range topo.NATS {
			if n == node {
				return "nats"
			}
		}
		for _, n := range topo.Edges {
			if n == node {
				return "edge"
			}
		}
		return "worker"
	}
	var all []string
	all = append(append(append(all, topo.NATS...), topo.Edges...), topo.Workers...)
	t := between(time.Second, 3*time.Second)
	kinds := opt.Kinds()
	for t < opt.Span-2*time.Second {
		f := Fault{Kind: kinds[rng.IntN(len(kinds))]}
		switch f.Kind {
		case FaultKillNATS, FaultDiskFull:
			f.Node = pick(rng, topo.NATS)
		case FaultKillEdge:
			f.Node = pick(rng, topo.Edges)
		case FaultKillWorker:
			f.Node = pick(rng, topo.Workers)
		default: // pause, partition
			f.Node = pick(rng, all)
		}
		f.At = t
		switch f.Kind {
		case FaultPause:
			f.Duration = between(opt.Lease*3/2, opt.Lease*4)
		case FaultPartition:
			f.Duration = between(opt.Lease*3/2, opt.Lease*5)
		default:
			f.Duration = between(3*time.Second, 10*time.Second)
		}
		if f.End() > opt.Span {
			f.Duration = opt.Span - f.At
		}
		// A pause or a partition outlasts a lease (the node's leases
		// expire meanwhile).
		ok := f.Node != "" && ((f.Kind != FaultPause && f.Kind != FaultPartition) || f.Duration > opt.Lease) && f.Duration > 0
		sameRole := 0
		for _, g := range s.Faults {
			if g.At < f.End() && f.At < g.End() && g.Node == f.Node {
				ok = false
			}
			// A NATS node counts as faulted until it has caught up.
			gEnd, fEnd := g.End(), f.End()
			if role(f.Node) == "nats" {
				gEnd, fEnd = gEnd+opt.CatchUp, fEnd+opt.CatchUp
			}
			if g.At < fEnd && f.At < gEnd && role(g.Node) == role(f.Node) {
				sameRole++
			}
		}
		switch role(f.Node) {
		case "nats":
			if sameRole+1 > minority {
				if !opt.AllowMajority {
					ok = false
				}
				f.Note = beyondNote
			}
		default:
			if sameRole > 0 {
				ok = false
			}
		}
		if ok {
			s.Faults = append(s.Faults, f)
		}
		t += between(2*time.Second, 6*time.Second)
	}
	return s
}

func pick(rng *rand.Rand, names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[rng.IntN(len(names))]
}
