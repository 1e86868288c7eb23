// Package testwait is the one polling wait the tests share. A test waits
// for an event that proves what it asserts; where that event can only be
// seen by asking again (an HTTP listing, a file, a screen), Until asks
// until the answer holds or a generous deadline passes (two minutes: a
// loaded 2-core machine under the race detector is slow, never that
// slow), and the failure says what it waited for and what it saw last.
// It is not a timer: no test asserts on how long the wait took.
package testwait

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Deadline is how long Until waits before it fails the test.
const Deadline = 2 * time.Minute

// Until polls cond until it returns true; past Deadline it fails tb with
// "waited for WHAT". Polls start at 5 ms and back off to 100 ms.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	UntilOK(tb, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("not yet")

// UntilOK polls check until it returns nil; past Deadline it fails tb
// with what was waited for and check's last error (what it saw).
func UntilOK(tb testing.TB, what string, check func() error) {
	tb.Helper()
	if err := Poll(context.Background(), Deadline, check); err != nil {
		tb.Fatalf("waited %v for %s: %v", Deadline, what, err)
	}
}

// Poll runs check until it returns nil, ctx ends or within passes; it
// returns nil or check's last error (with the context's, if it ended).
func Poll(ctx context.Context, within time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	every := 5 * time.Millisecond
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		every = min(every*2, 100*time.Millisecond)
		t.Reset(every)
	}
}
