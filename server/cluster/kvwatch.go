package cluster

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// watchKV starts a watch of kv's keys under filters (every key when
// none) that ends when ctx does.
// nats.go's watch, given a context that ends while it is being set up on
// an empty bucket, closes its updates channel while it sends the "no
// initial values" marker on it (a data race, and a panic when the send
// comes second): the watch gets a context of its own, ended only once
// the watch is set up.
func watchKV(ctx context.Context, kv jetstream.KeyValue, filters []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var w jetstream.KeyWatcher
	var err error
	if len(filters) == 0 {
		w, err = kv.WatchAll(wctx, opts...)
	} else {
		w, err = kv.WatchFiltered(wctx, filters, opts...)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	context.AfterFunc(ctx, cancel)
	return w, nil
}
