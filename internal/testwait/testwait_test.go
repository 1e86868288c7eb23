package testwait

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollUntilTrue(t *testing.T) {
	var n atomic.Int32
	Until(t, "the third call", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Fatalf("called %d times, want 3", n.Load())
	}
}

// A wait that never holds ends with the check's last error.
func TestPollSaysWhatItSawLast(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Poll(ctx, time.Hour, func() error { return errors.New("2 of 4 online") })
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "2 of 4 online") {
		t.Fatalf("err %v", err)
	}
}
