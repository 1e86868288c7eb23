package cluster

import (
	"context"
	"log/slog"
	"time"

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

// followKV watches kv's keys under filters (every key when none) until
// ctx or the node's own context ends, handing entry each key's value or
// removal, and calling loaded once, after the first watch's first load.
// A watch that cannot be made, or that ends, is made again after
// rewatch (what names the bucket's contents in the warning); it brings
// every key again, so a follower keeps only what is newer than it holds.
// The shared loop of the settings' and the rollouts' storages.
func (n *Node) followKV(ctx context.Context, log *slog.Logger, kv jetstream.KeyValue, filters []string, what string,
	rewatch time.Duration, loaded func(), entry func(jetstream.KeyValueEntry)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.bgCtx, cancel)
	defer stop()
	first := true
	for ctx.Err() == nil {
		w, err := watchKV(ctx, kv, filters)
		if err != nil {
			log.Warn("cluster: cannot watch the "+what+"; retrying", "err", err)
		} else {
			drainKV(ctx, w, &first, loaded, entry)
			_ = w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatch):
		}
	}
}

// drainKV hands w's entries to entry until w or ctx ends; the first
// load's end (a nil entry) calls loaded, once while *first.
func drainKV(ctx context.Context, w jetstream.KeyWatcher, first *bool, loaded func(), entry func(jetstream.KeyValueEntry)) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				if *first {
					*first = false
					loaded()
				}
				continue
			}
			entry(e)
		}
	}
}
