package cluster

import (
	"flag"
	"fmt"
	"testing"
)

// heavyFixtures is how many tests of this package run their cluster at
// the same time: each is 1 to 3 nats-server nodes and up to 4
// termservers, which mostly wait (on leases, elections, agents' sleeps)
// rather than compute, so a few share 2 cores well; more only thrash.
const heavyFixtures = 4

// heavySlots holds one token per test running its cluster.
var heavySlots = make(chan struct{}, heavyFixtures)

// heavy marks a test that starts processes or nodes of its own (ports
// picked free, files under its TempDir): it runs in parallel with the
// others, at most heavyFixtures at once whatever -parallel says; its
// slot is given back after every cleanup registered later (its nodes
// stopped).
func heavy(t *testing.T) {
	t.Helper()
	t.Parallel()
	heavySlots <- struct{}{}
	t.Cleanup(func() { <-heavySlots })
}

// Heavy is heavy for the package's external tests (cluster_test).
var Heavy = heavy

// ParallelDefault raises go test's -parallel to heavyFixtures when it
// was not given (call it after flag.Parse, before m.Run): its default,
// GOMAXPROCS, runs 2 of these waiting tests at a time on a 2-core
// machine.
func ParallelDefault() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", fmt.Sprint(heavyFixtures)); err != nil {
			panic(err)
		}
	}
}
