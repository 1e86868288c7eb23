package cluster

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/config"
)

// histStreamConfig is the session history stream's configuration (the
// claims and cached replies are in it too, one subject per message), its
// retention included: records older than cluster.historyMaxAgeDays, or
// the oldest past cluster.historyMaxMegabytes, are dropped by JetStream
// (never a new one refused). Open applies it to a stream that exists
// too, so a changed setting takes effect at the next start of any node.
// `termserver export-sessions` is the archive path before that.
func histStreamConfig(cfg config.Cluster) jetstream.StreamConfig {
	sc := jetstream.StreamConfig{
		Name:        HistStream,
		Description: "termlink: session history: each message's claim, cached reply and turn (nanobot records), one subject per message under its session's",
		Subjects:    []string{histPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.HistoryMaxAge,
		MaxBytes:    cfg.HistoryMaxBytes,
		AllowDirect: true, // the edges' lookups (PeekClaim)
	}
	if sc.MaxAge > 0 && sc.MaxAge < cfg.DedupeTTL {
		// The claims are in the history: a message is deduplicated for
		// dedupeHours at least.
		sc.MaxAge = cfg.DedupeTTL
	}
	if sc.MaxBytes <= 0 {
		sc.MaxBytes = -1 // no limit
	}
	if sc.MaxAge > 0 && sc.Duplicates > sc.MaxAge {
		sc.Duplicates = sc.MaxAge // JetStream refuses a window longer than the age limit
	}
	return sc
}

// errCodeStorageExceeded is JetStream's "insufficient storage resources
// available" (nats-server's JSStorageResourcesExceededErr).
const errCodeStorageExceeded jetstream.ErrorCode = 10047

// histStreamError says what to change when the NATS servers cannot
// reserve the history's byte limit.
func histStreamError(cfg config.Cluster, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStorageExceeded {
		return fmt.Errorf("%w: the NATS servers cannot reserve cluster.historyMaxMegabytes (%d MiB per replica) of file storage for it: lower it, or raise jetstream { max_file_store } in the NATS configuration",
			err, cfg.HistoryMaxBytes>>20)
	}
	return err // named by ensure
}
