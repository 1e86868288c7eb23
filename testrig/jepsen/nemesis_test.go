package jepsen

import (
	"reflect"
	"testing"
	"time"
)

var testTopo = Topology{NATS: []string{"n1", "n2", "n3"}, Edges: []string{"edge-1", "edge-2"}, Workers: []string{"worker-1", "worker-2"}}

func TestGenerateDeterministic(t *testing.T) {
	for seed := range uint64(20) {
		a := Generate(seed, testTopo, NemesisOptions{})
		b := Generate(seed, testTopo, NemesisOptions{})
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d gave two schedules:\n%s\n%s", seed, a, b)
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
	lease := 2 * time.Second
	kinds := map[string]int{}
	for seed := range uint64(300) {
		s := Generate(seed, testTopo, NemesisOptions{Span: 36 * time.Second, Lease: lease})
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
			if f.Kind == FaultPause && f.Duration <= lease {
				t.Errorf("seed %d: pause %v not longer than the lease", seed, f)
			}
			if i > 0 && f.At < s.Faults[i-1].At {
				t.Errorf("seed %d: faults out of order", seed)
			}
			for _, g := range s.Faults[:i] {
				if g.Node == f.Node && g.At < f.End() && f.At < g.End() {
					t.Errorf("seed %d: two faults on %s at once: %v, %v", seed, f.Node, g, f)
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
	for _, k := range []string{FaultKillNATS, FaultKillEdge, FaultKillWorker, FaultPause} {
		if kinds[k] == 0 {
			t.Errorf("300 seeds drew no %s", k)
		}
	}
}

func TestGenerateMajoritySaysSo(t *testing.T) {
	noted := 0
	for seed := range uint64(300) {
		s := Generate(seed, testTopo, NemesisOptions{AllowMajority: true})
		for _, f := range s.Faults {
			if f.Note == "" {
				continue
			}
			noted++
			if f.Kind != FaultKillNATS && !(f.Kind == FaultPause && (f.Node == "n1" || f.Node == "n2" || f.Node == "n3")) {
				t.Errorf("seed %d: %v noted but not a NATS fault", seed, f)
			}
			if downAt(s, testTopo.NATS, f.At) < 2 && downAt(s, testTopo.NATS, f.End()-1) < 2 {
				// It overlaps another NATS fault somewhere in its span.
				over := false
				for _, g := range s.Faults {
					if g != f && g.At < f.End() && f.At < g.End() && (g.Node == "n1" || g.Node == "n2" || g.Node == "n3") {
						over = true
					}
				}
				if !over {
					t.Errorf("seed %d: %v noted beyond the promise but overlaps no other NATS fault", seed, f)
				}
			}
		}
	}
	if noted == 0 {
		t.Error("300 seeds with AllowMajority drew no fault beyond JetStream's promise")
	}
}
