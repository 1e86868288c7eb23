package update

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// A worker binary busy for writing (ETXTBSY: a child forked meanwhile
// still holds it) is started again after a pause; any other error, or
// the eighth busy one, is returned as it is.
func TestStartBusyRetriesTextFileBusy(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	busy := &os.PathError{Op: "fork/exec", Path: "/opt/termd/termd", Err: syscall.ETXTBSY}
	for _, tc := range []struct {
		name   string
		errs   []error // what each start returns; nil after the list
		calls  int
		sleeps []time.Duration
		want   error
	}{
		{"starts at once", nil, 1, nil, nil},
		{"busy twice", []error{busy, busy}, 3, []time.Duration{10 * ms, 20 * ms}, nil},
		{"busy for good", []error{busy, busy, busy, busy, busy, busy, busy, busy, busy}, 8,
			[]time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms}, busy},
		{"another error", []error{os.ErrPermission}, 1, nil, os.ErrPermission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var slept []time.Duration
			err := startBusy(func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			}, func(d time.Duration) { slept = append(slept, d) })
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
			if calls != tc.calls {
				t.Errorf("%d starts, want %d", calls, tc.calls)
			}
			if fmt.Sprint(slept) != fmt.Sprint(tc.sleeps) {
				t.Errorf("slept %v, want %v", slept, tc.sleeps)
			}
		})
	}
}
