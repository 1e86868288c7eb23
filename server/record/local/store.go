// Package local is the store of record of one termserver (record.Store,
// with the parts record.Joiner, record.InFlight and record.Recoverer) in
// its workspace: every message, start and reply is made durable in the
// write-ahead log (workspace/wal, one fdatasync per batch for every
// session) and then handed to the session store, which keeps it in memory
// (write-behind); every second the checkpoint writes the pending lines to
// the session files (one write per file), makes them durable with one
// syncfs and releases the log (journal.go). Every read of a session file
// through the session store (dedupe reloads, recovery, the history API)
// writes that file's pending lines first, so no reader sees a stale file.
// The dedupe table (dedupe.go) answers a resent message id from memory,
// completed or reloaded from the session files when it was trimmed.
//
// At start-up the log's records the files lack are replayed into them,
// then Recover reads the tail of every session file: it fills the dedupe
// table and returns the messages accepted and never answered, to run
// again. A run's start is recorded before the agent gets the message
// (run_started, or run_interrupted for the re-run of one a restart cut
// short), so a message a restart cut short twice is answered with an
// error instead of a third run.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/metrics"
	"termlink/server/record"
	"termlink/server/session"
	"termlink/server/wal"
)

// Options configure a Store.
type Options struct {
	Logger *slog.Logger
	// DedupePerSession bounds the message ids remembered per session,
	// DedupeBytes the replies cached in all.
	DedupePerSession int
	DedupeBytes      int64
	// WAL are the write-ahead log's options (NoSync, test hooks).
	WAL wal.Options
	// Runs reports whether a channel's messages are run here (it exists
	// and is enabled); Recover leaves the others unanswered.
	Runs func(channelID string) bool
	// WriteFailed counts a session-log write that failed (the disk).
	WriteFailed func()
}

// Store is the workspace's store of record.
type Store struct {
	log      *slog.Logger
	sessions *session.Store // read here; written through journal
	journal  *journal
	dedupe   *dedupe
	queue    record.Queue
	opt      Options

	// unwritable is the last session-log write failure, nil once a write
	// succeeds again; /healthz reports it.
	unwritable atomic.Pointer[string]
	// The messages whose start was recorded with them (Accept, a message
	// of an idle session that starts at once) or with the reply before
	// them (Finish with next) are marked in their dedupe entries
	// (dedupeEntry.premarked): Start writes nothing for them.

	// reruns holds the messages Recover found started and cut short once
	// (session key + "\x00" + message id): their next start is recorded
	// run_interrupted instead of run_started (Start). Only a recovered
	// message (bus.Inbound.Recovered) is looked up.
	reruns sync.Map
}

var (
	_ record.Store     = (*Store)(nil)
	_ record.Joiner    = (*Store)(nil)
	_ record.InFlight  = (*Store)(nil)
	_ record.Recoverer = (*Store)(nil)
)

// Open opens the write-ahead log in walDir (replaying what the session
// files in sessions lack) in front of sessions. queue is where accepted
// messages go to run.
func Open(walDir string, sessions *session.Store, queue record.Queue, opt Options) (*Store, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Runs == nil {
		opt.Runs = func(string) bool { return true }
	}
	if opt.WriteFailed == nil {
		opt.WriteFailed = func() {}
	}
	j, err := openJournal(walDir, opt.WAL, sessions, opt.Logger, opt.WriteFailed)
	if err != nil {
		return nil, err
	}
	s := &Store{log: opt.Logger, sessions: sessions, journal: j, queue: queue, opt: opt}
	s.dedupe = newDedupe(opt.DedupePerSession, opt.DedupeBytes, s.loadRecent)
	return s, nil
}

// Accept implements record.Store: dedupe, then the message (and, when it
// starts at once, its start) in one durable append, then ack, then the
// run queue.
func (s *Store) Accept(ctx context.Context, in bus.Inbound, perSession int, ack func(record.Accepted)) error {
	prior, claimed, err := s.dedupe.claim(in.SessionKey, in.MessageID, in.RunID)
	if err != nil {
		return fmt.Errorf("reading the session log for duplicates: %w", err)
	}
	if claimed == nil {
		res := record.Accepted{RunID: prior.runID, Duplicate: true, Reply: prior.reply, Pending: prior.reply == nil,
			Detail: "done: cached reply sent"}
		if res.Pending {
			res.Detail = "pending: run still in progress"
		}
		ack(res)
		return nil
	}
	first, err := s.queue.ReserveFirst(in.SessionKey, perSession)
	if err != nil {
		s.dedupe.forget(in.SessionKey, in.MessageID)
		return err
	}
	recs := []session.Record{{Role: "user", Content: in.Text, MessageID: in.MessageID, RunID: in.RunID,
		Timestamp: in.Received.Format(session.TimeLayout)}}
	// A message that starts at once gets its start recorded with it: one
	// log append (one group commit) instead of a second before its run.
	premarked := first && s.queue.StartsAtOnce(in.SessionKey)
	if premarked {
		recs = append(recs, startRecord(in, false))
	}
	if err := s.appendLog(ctx, in.SessionKey, recs...); err != nil {
		s.queue.Release(in.SessionKey)
		s.dedupe.forget(in.SessionKey, in.MessageID)
		return fmt.Errorf("recording message: %w", err)
	}
	if premarked { // before Put: its Start comes after
		s.dedupe.premark(claimed)
	}
	ack(record.Accepted{RunID: in.RunID})
	in.Ref = claimed // Start and Finish reach its entry without a lookup
	if err := s.queue.Put(ctx, in); err != nil {
		s.queue.Release(in.SessionKey)
		// It is in the session log: the next start runs it.
		s.log.Warn("message recorded but not queued; it runs at the next start",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
	}
	return nil
}

// appendLog makes records durable in the write-ahead log and writes them
// to the session file (journal.append), and keeps /healthz's view of the
// workspace: a write failure marks it unwritable until a write succeeds.
// A cancelled ctx or a closed store or log says nothing about the disk.
func (s *Store) appendLog(ctx context.Context, key string, recs ...session.Record) error {
	err := s.journal.append(ctx, key, recs)
	switch {
	case err == nil:
		if s.unwritable.Load() != nil {
			s.unwritable.Store(nil)
			s.log.Info("session log writable again")
		}
	case ctx.Err() != nil, errors.Is(err, session.ErrClosed), errors.Is(err, wal.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	default:
		msg := err.Error()
		s.unwritable.Store(&msg)
		s.opt.WriteFailed()
	}
	return err
}

// appendLogRetrying appends like appendLog, retrying a failed write with
// a capped, jittered exponential backoff until it succeeds, the store is
// closed or ctx ends. It is for records that must not be lost while the
// server runs (replies): a full disk holds the run's session, it does not
// drop the reply.
func (s *Store) appendLogRetrying(ctx context.Context, key string, recs ...session.Record) error {
	err := s.appendLog(ctx, key, recs...)
	if err == nil || errors.Is(err, session.ErrClosed) || ctx.Err() != nil {
		return err // the common case needs no backoff state
	}
	s.log.Error("session log write failed; retrying", "session", key, "err", err)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = 0 // until it works or ctx ends
	return backoff.Retry(func() error {
		err := s.appendLog(ctx, key, recs...)
		if err != nil && (errors.Is(err, session.ErrClosed) || ctx.Err() != nil) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
}

// Health implements record.Store: whether the workspace takes writes.
func (s *Store) Health() (ok bool, reason string) {
	if msg := s.unwritable.Load(); msg != nil {
		return false, "workspace unwritable: the last session log write failed: " + *msg
	}
	if msg := s.journal.syncErr.Load(); msg != nil {
		return false, "workspace unwritable: the last checkpoint could not write the session files: " + *msg
	}
	return true, ""
}

// Finish implements record.Store: the reply (with next's start, when
// next runs right after it) in one durable append, retried until it is
// written or ctx ends, then the dedupe entry. A reply never written is
// not sent (a restart runs the message again, once), so no device sees a
// reply the server does not remember.
func (s *Store) Finish(ctx context.Context, in bus.Inbound, reply *link.Message, media []string, next *bus.Inbound) bool {
	recs := []session.Record{{Role: "assistant", Content: reply.Text, MessageID: in.MessageID, RunID: in.RunID,
		FinishReason: reply.FinishReason, Media: media}}
	premarked := false
	// A re-run records run_interrupted itself (Start); a message not
	// pending (never accepted here) has its start recorded by Start.
	if next != nil && next.SessionKey == in.SessionKey && !s.isRerun(*next) &&
		s.dedupe.premarkPending(next.SessionKey, next.MessageID, entryOf(*next)) {
		premarked = true
		recs = append(recs, startRecord(*next, false))
	}
	if err := s.appendLogRetrying(ctx, in.SessionKey, recs...); err != nil {
		if premarked {
			s.dedupe.setPremark(next.SessionKey, next.MessageID, entryOf(*next), false)
		}
		s.log.Error("reply not written to the session log; not sent, the next start runs the message again",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
		return false
	}
	s.dedupe.finish(in.SessionKey, in.MessageID, reply, entryOf(in)) // its mark goes too (answered without starting: cancelled)
	return true
}

// entryOf is in's dedupe entry if its Accept here set it (nil: looked up
// by its session key and id).
func entryOf(in bus.Inbound) *dedupeEntry {
	e, _ := in.Ref.(*dedupeEntry)
	return e
}

// isRerun reports whether in is a recovered message whose earlier run a
// restart cut short (Recover: reruns).
func (s *Store) isRerun(in bus.Inbound) bool {
	if !in.Recovered {
		return false
	}
	_, ok := s.reruns.Load(in.SessionKey + "\x00" + in.MessageID)
	return ok
}

// Start implements record.Store: the start is made durable before the
// agent gets the message: a run_started record, or for a message whose
// earlier run a restart cut short (Recover found its run_started), a
// run_interrupted record. It is written under stopCtx: a cancel answers
// the run but does not undo its start.
func (s *Store) Start(_, stopCtx context.Context, in bus.Inbound) (answer *agent.Result, ok bool) {
	if s.dedupe.takePremark(in.SessionKey, in.MessageID, entryOf(in)) {
		return nil, true // recorded with the message (Accept) or the reply before it (Finish)
	}
	rerun := s.isRerun(in)
	if err := s.appendLog(stopCtx, in.SessionKey, startRecord(in, rerun)); err != nil {
		// Not recorded, not run: the next start finds it unanswered.
		s.log.Error("cannot record the start of a run; not run now",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
		return nil, false
	}
	if rerun {
		s.reruns.Delete(in.SessionKey + "\x00" + in.MessageID)
	}
	return nil, true
}

// Joined implements record.Joiner: the start of a message a running turn
// took. The turn has it already, so the record follows the start instead
// of preceding it: a crash in between lets it run once more than counted.
// Best effort: a failure is logged.
func (s *Store) Joined(ctx context.Context, in bus.Inbound) {
	if err := s.appendLog(ctx, in.SessionKey, startRecord(in, false)); err != nil {
		s.log.Warn("cannot record the start of a message a running turn took", "session", in.SessionKey,
			"message_id", in.MessageID, "err", err)
	}
}

// startRecord is the record of a run's start: run_started, or
// run_interrupted for the re-run of a run a restart cut short.
func startRecord(in bus.Inbound, rerun bool) session.Record {
	if rerun {
		return session.Record{Role: "system", MessageID: in.MessageID, RunID: in.RunID,
			Content: "the run of message " + in.MessageID + " was cut short by a server restart; it runs again once",
			Extra:   interruptedExtra}
	}
	return session.Record{Role: "system", MessageID: in.MessageID, RunID: in.RunID,
		Content: "the run of message " + in.MessageID + " started",
		Extra:   startedExtra}
}

// The Extra of the start records, shared by all of them (one per
// message): only read, never written.
var (
	startedExtra     = map[string]any{"event": record.EventStarted}
	interruptedExtra = map[string]any{"event": record.EventInterrupted}
)

// Deliver implements record.Store: the reply, progress or delta goes to
// the dispatcher of this server's connections (progress and deltas are
// never recorded). A reply not dispatched is in
// the session log: the device gets it from dedupe when it resends.
func (s *Store) Deliver(ctx context.Context, in bus.Inbound, out bus.Outbound) {
	err := s.queue.Dispatch(ctx, out)
	if err != nil && out.Kind == bus.Final {
		s.log.Warn("reply not dispatched; the device gets it from dedupe when it resends",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
	}
}

// Cancel implements record.Store: every message runs here.
func (s *Store) Cancel(_ context.Context, sessionKey, messageID string) bool {
	return s.queue.Cancel(sessionKey, messageID)
}

// Pending implements record.InFlight: the dedupe table holds it pending.
func (s *Store) Pending(sessionKey, messageID string) bool {
	return s.dedupe.isPending(sessionKey, messageID)
}

// Close implements record.Store: it closes the write-ahead log (after a
// last checkpoint). The session store is the caller's.
func (s *Store) Close() error { return s.journal.close() }

// Metrics implements record.Store: the write-ahead log's counters, read
// from its stats at each scrape: records made durable, batches written,
// fdatasyncs (their ratio to records is the group commit's batching) and
// segments on disk.
func (s *Store) Metrics(r *metrics.Registry) {
	stats := s.journal.Stats
	r.NewCounterFunc("termlink_wal_records_total", "Records made durable in the write-ahead log.", func() float64 { return float64(stats().Appends) })
	r.NewCounterFunc("termlink_wal_batches_total", "Write-ahead log batches written (one write each).", func() float64 { return float64(stats().Batches) })
	r.NewCounterFunc("termlink_wal_syncs_total", "Write-ahead log fdatasyncs; records/syncs is the group commit's batch size.", func() float64 { return float64(stats().Syncs) })
	r.NewGaugeFunc("termlink_wal_segments", "Write-ahead log segments on disk.", func() float64 { return float64(stats().Segments) })
}

// DedupeStats is the dedupe table's counters (tests and benchmarks).
func (s *Store) DedupeStats() DedupeStats { return s.dedupe.stats() }

// dedupeReadBytes bounds how much of a session file dedupe reads when it
// completes or reloads a session: the last DedupePerSession messages, or
// as many as the last 4 MiB hold (1,024 messages of up to ~1 KiB of text
// each way fit; sessions of long messages keep fewer ids, never fewer
// than the start-up tail's). Reading the whole of a session of 20 KB
// messages (20 MB) for the first message after a restart is what it
// saves: no device resends an id that old (link.Client resends only its
// unanswered messages).
const dedupeReadBytes = 4 << 20

// loadRecent reads the records of a session's last n messages for dedupe
// (at most dedupeReadBytes of them); a session the log does not have has
// none.
func (s *Store) loadRecent(key string, n int) ([]session.Record, error) {
	sess, err := s.sessions.TailMessages(key, n, dedupeReadBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return sess.Records, nil
}
