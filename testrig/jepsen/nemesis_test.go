package jepsen

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

var testTopo = Topology{NATS: []string{"n1", "n2", "n3"}, Edges: []string{"edge-1", "edge-2"}, Workers: []string{"worker-1", "worker-2"}}

func TestGenerateDeterministic(t *testing.T) {
	for _, opt := range []NemesisOptions{{}, {Partitions: true, DiskFull: true}, {Partitions: true}, {AllowMajority: true, DiskFull: true}} {
		for seed := range uint64(20) {
			a := Generate(seed, testTopo, opt)
			b := Generate(seed, testTopo, opt)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d %+v gave two schedules:\n%s\n%s", seed, opt, a, b)
			}
		}
	}
	if reflect.DeepEqual(Generate(1, testTopo, NemesisOptions{}).Faults, Generate(2, testTopo, NemesisOptions{}).Faults) {
		t.Error("seeds 1 and 2 gave the same faults")
	}
}

// overlapping returns the faults of s on nodes of names in force at t.
func downAt(s Schedule, names []string, at time.Duration) int {
	n := 0
	for _, f := range s.Faults {
		for _, name := range names {
			if f.Node == name && f.At <= at && at < f.End() {
				n++
			}
		}
	}
	return n
}

func TestGenerateRules(t *testing.T) {
	for _, opt := range []NemesisOptions{{}, {Partitions: true}, {DiskFull: true}, {Partitions: true, DiskFull: true}} {
		t.Run(fmt.Sprintf("partitions=%v,disk_full=%v", opt.Partitions, opt.DiskFull), func(t *testing.T) { generateRules(t, opt) })
	}
}

func isNATS(node string) bool { return slices.Contains(testTopo.NATS, node) }

func generateRules(t *testing.T, opt NemesisOptions) {
	lease := 2 * time.Second
	opt.Span, opt.Lease = 36*time.Second, lease
	kinds := map[string]int{}
	for seed := range uint64(300) {
		s := Generate(seed, testTopo, opt)
		if len(s.Faults) == 0 {
			t.Errorf("seed %d: no faults", seed)
		}
		if s.BeyondPromise() {
			t.Errorf("seed %d: a fault beyond JetStream's promise without AllowMajority:\n%s", seed, s)
		}
		for i, f := range s.Faults {
			kinds[f.Kind]++
			if f.At <= 0 || f.End() > s.Span || f.Duration <= 0 {
				t.Errorf("seed %d: fault %v outside the span %v", seed, f, s.Span)
			}
			if (f.Kind == FaultPause || f.Kind == FaultPartition) && f.Duration <= lease {
				t.Errorf("seed %d: %v not longer than the lease", seed, f)
			}
			if f.Kind == FaultPartition && !opt.Partitions || f.Kind == FaultDiskFull && !opt.DiskFull {
				t.Errorf("seed %d: %v drawn, not enabled (%+v)", seed, f, opt)
			}
			if f.Kind == FaultDiskFull && !isNATS(f.Node) {
				t.Errorf("seed %d: %v: a disk_full of a node that is not a NATS node", seed, f)
			}
			if i > 0 && f.At < s.Faults[i-1].At {
				t.Errorf("seed %d: faults out of order", seed)
			}
			for _, g := range s.Faults[:i] {
				if g.Node == f.Node && g.At < f.End() && f.At < g.End() {
					t.Errorf("seed %d: two faults on %s at once: %v, %v", seed, f.Node, g, f)
				}
				// A NATS node back less than 10 s (the default CatchUp)
				// still counts: no other NATS fault may start then.
				if isNATS(f.Node) && isNATS(g.Node) && f.At < g.End()+10*time.Second {
					t.Errorf("seed %d: %v drawn while %s was still catching up after %v", seed, f, g.Node, g)
				}
			}
		}
		for at := time.Duration(0); at < s.Span; at += 100 * time.Millisecond {
			if n := downAt(s, testTopo.NATS, at); n > 1 {
				t.Errorf("seed %d: %d NATS nodes down at %v:\n%s", seed, n, at, s)
				break
			}
			if downAt(s, testTopo.Edges, at) > 1 || downAt(s, testTopo.Workers, at) > 1 {
				t.Errorf("seed %d: both edges or both workers down at %v:\n%s", seed, at, s)
				break
			}
		}
	}
	for _, k := range opt.Kinds() {
		if kinds[k] == 0 {
			t.Errorf("300 seeds drew no %s", k)
		}
	}
}

// TestGeneratePartitionsEveryRole: the partitions drawn over 300 seeds
// cut off NATS nodes, edges and workers, and some overlap (a minority
// side of more than one node).
func TestGeneratePartitionsEveryRole(t *testing.T) {
	cut := map[string]int{}
	overlaps := 0
	for seed := range uint64(300) {
		s := Generate(seed, testTopo, NemesisOptions{Partitions: true})
		for i, f := range s.Faults {
			if f.Kind != FaultPartition {
				continue
			}
			cut[f.Node]++
			for _, g := range s.Faults[:i] {
				if g.Kind == FaultPartition && g.At < f.End() && f.At < g.End() {
					overlaps++
				}
			}
		}
	}
	for _, n := range append(append(append([]string{}, testTopo.NATS...), testTopo.Edges...), testTopo.Workers...) {
		if cut[n] == 0 {
			t.Errorf("300 seeds never cut off %s: %v", n, cut)
		}
	}
	if overlaps == 0 {
		t.Error("300 seeds drew no two partitions at once (a minority side of two nodes)")
	}
}

// TestGenerateOldSeedsUnchanged: without the new kinds, a seed draws the
// same faults whatever else is added; with them, the faults differ.
func TestGenerateOldSeedsUnchanged(t *testing.T) {
	// Seed 1's schedule as drawn before partitions and full disks.
	got := Generate(1, testTopo, NemesisOptions{})
	for _, f := range got.Faults {
		if f.Kind == FaultPartition || f.Kind == FaultDiskFull {
			t.Fatalf("seed 1 without the new kinds drew %v", f)
		}
	}
	if reflect.DeepEqual(got.Faults, Generate(1, testTopo, NemesisOptions{Partitions: true, DiskFull: true}).Faults) {
		t.Error("seed 1 gave the same faults with and without the new kinds")
	}
}

func TestGenerateMajoritySaysSo(t *testing.T) {
	noted := 0
	for seed := range uint64(300) {
		s := Generate(seed, testTopo, NemesisOptions{AllowMajority: true, Partitions: seed%2 == 0, DiskFull: seed%3 == 0})
		for _, f := range s.Faults {
			if f.Note == "" {
				continue
			}
			noted++
			if !isNATS(f.Node) {
				t.Errorf("seed %d: %v noted but not a NATS fault", seed, f)
			}
			if downAt(s, testTopo.NATS, f.At) < 2 && downAt(s, testTopo.NATS, f.End()-1) < 2 {
				// It overlaps another NATS fault somewhere in its span,
				// counting the 10 s a node takes to catch up after it.
				over := false
				for _, g := range s.Faults {
					if g != f && g.At < f.End()+10*time.Second && f.At < g.End()+10*time.Second && isNATS(g.Node) {
						over = true
					}
				}
				if !over {
					t.Errorf("seed %d: %v noted beyond the promise but overlaps no other NATS fault or its catch-up", seed, f)
				}
			}
		}
	}
	if noted == 0 {
		t.Error("300 seeds with AllowMajority drew no fault beyond JetStream's promise")
	}
}
