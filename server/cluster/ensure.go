package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureTry bounds one try of a create-or-update. JetStream leaves a
// request to create a stream or bucket that another client is creating
// at the same moment without an answer (nats.go#949): nodes started
// together (a service manager starts them so) would each wait out a long
// timeout per stream and bucket, one after the other. A short try, then
// another, finds what the other node made.
const ensureTry = 2 * time.Second

// ensure runs one create-or-update step (what names it in errors),
// trying it again alone, after a jittered pause, while a try goes
// unanswered or JetStream is not ready, until ctx ends. A refusal that
// is an answer (a config JetStream will not take) returns at once.
func ensure[T any](ctx context.Context, what string, fn func(ctx context.Context) (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, ensureTry)
		v, err := fn(tctx)
		cancel()
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil || !retryable(err) {
			return v, fmt.Errorf("cluster: %s: %w", what, err)
		}
		pause := time.Duration(min(attempt, 5)) * 100 * time.Millisecond
		pause += rand.N(pause) // nodes that collided do not collide again in step
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("cluster: %s: %w", what, err)
		case <-time.After(pause):
		}
	}
}

// retryable reports whether err is JetStream not answering (yet), rather
// than an answer.
func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || isNotReady(err)
}

// isNotReady reports JetStream's "not now" answers: no responders (no
// meta leader yet), a request timeout, 503 (temporarily unavailable).
func isNotReady(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		(errors.As(err, &api) && api.Code == 503)
}
