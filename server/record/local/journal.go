package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"termlink/server/session"
	"termlink/server/wal"
)

// journal puts the write-ahead log (workspace/wal) in front of the session
// files: a record is durable once the log holds it (one group-committed
// fdatasync for every session), and is then handed to the session store,
// which keeps it in memory (session.Options.WriteBehind: no write, no
// handoff) before append returns. Readers through the session store
// (rebuild, dedupe reloads, the history API) see it: every read writes
// the pending lines of its file first. Every checkpointInterval the
// checkpoint's store.Sync writes every pending line (one write per file)
// and makes the files durable with one syncfs; only then is the log
// released up to the last record they hold. A failed Sync keeps the
// lines pending and the log unreleased (a crash replays them), and
// /healthz says unwritable until a checkpoint succeeds.
//
// Crash: Open replays the unreleased records into the session files,
// skipping those a file already holds (same role, message id and event:
// each is written at most once per message), then syncs and releases.
//
// Disk trouble: a failed log write or fsync fails the log (wal.ErrFailed)
// until it is reopened; every append fails meanwhile (the runtime refuses
// new messages, holds replies, and /healthz says unwritable). The
// checkpointer reopens it with a backoff; records of the failed batch were
// answered as failed, so the reopen releases them instead of replaying.
type journal struct {
	dir   string
	opt   wal.Options
	store *session.Store
	log   *slog.Logger

	mu     sync.RWMutex // appends hold it for reading; reopen and close for writing
	wl     *wal.Log
	broken error // non-nil while the log is failed and not yet reopened
	failed atomic.Bool
	// syncErr is the last checkpoint's failure to write or sync the
	// session files, nil once one succeeds; /healthz reports it.
	syncErr atomic.Pointer[string]
	// onSyncFail is called when a checkpoint fails to write or sync the
	// session files (Options.WriteFailed).
	onSyncFail func()

	prior wal.Stats // counts of the logs a reopen replaced (under mu)

	fmu sync.Mutex
	// flights are the appends in flight, in the order they began: the
	// log's Next when each began (never decreasing along the slice), from
	// flights[off]; seq numbers flights[off] (begin's id).
	flights []flight
	off     int
	seq     uint64

	stop chan struct{}
	done chan struct{}
}

const checkpointInterval = time.Second

// openJournal opens the log in dir, brings the session files up to date
// from it and starts the checkpointer.
// onSyncFail (may be nil) is called at each checkpoint that fails to
// write or sync the session files.
func openJournal(dir string, opt wal.Options, store *session.Store, log *slog.Logger, onSyncFail func()) (*journal, error) {
	opt.Logger = log
	if onSyncFail == nil {
		onSyncFail = func() {}
	}
	j := &journal{dir: dir, opt: opt, store: store, log: log,
		onSyncFail: onSyncFail, stop: make(chan struct{}), done: make(chan struct{})}
	wl, err := j.open(true)
	if err != nil {
		return nil, err
	}
	j.wl = wl
	go j.checkpointer()
	return j, nil
}

// walRecord is one replayed log record: a session key and encoded lines.
type walRecord struct {
	key   string
	lines []byte
}

func decodeWAL(p []byte) (walRecord, error) {
	key, lines, ok := bytes.Cut(p, []byte{'\n'})
	if !ok || len(key) == 0 {
		return walRecord{}, errors.New("write-ahead log record without a session key")
	}
	return walRecord{key: string(key), lines: bytes.Clone(lines)}, nil
}

// open opens the log; apply says whether the unreleased records are
// written to the session files (at start-up) or dropped (at a reopen
// after a failure: they belong to appends that were answered as failed).
// Then the session files are synced and the log released.
func (j *journal) open(apply bool) (*wal.Log, error) {
	var recs []walRecord
	replay := func(lsn wal.LSN, p []byte) error {
		r, err := decodeWAL(p)
		if err != nil {
			j.log.Warn("write-ahead log: skipping a record", "lsn", lsn, "err", err)
			return nil
		}
		recs = append(recs, r)
		return nil
	}
	if !apply {
		replay = nil
	}
	wl, err := wal.Open(j.dir, j.opt, replay)
	if err != nil {
		return nil, fmt.Errorf("opening the write-ahead log: %w", err)
	}
	if err := j.replay(recs); err != nil {
		wl.Close()
		return nil, err
	}
	if err := j.store.Sync(); err != nil {
		wl.Close()
		return nil, fmt.Errorf("syncing the session files: %w", err)
	}
	if err := wl.Release(wl.Durable()); err != nil {
		wl.Close()
		return nil, err
	}
	return wl, nil
}

// recordID names a record within its session: each role, message id and
// event is written once.
func recordID(r session.Record) string {
	ev, _ := r.Extra["event"].(string)
	return r.Role + "\x00" + r.MessageID + "\x00" + ev
}

// replay writes to each session file the records it does not hold yet,
// in log order.
func (j *journal) replay(recs []walRecord) error {
	if len(recs) == 0 {
		return nil
	}
	byKey := map[string][]session.Record{}
	var keys []string
	for _, r := range recs {
		rs, err := session.DecodeRecords(r.lines)
		if err != nil {
			j.log.Warn("write-ahead log: skipping a record", "session", r.key, "err", err)
			continue
		}
		if _, ok := byKey[r.key]; !ok {
			keys = append(keys, r.key)
		}
		byKey[r.key] = append(byKey[r.key], rs...)
	}
	written := 0
	for _, key := range keys {
		rs := byKey[key]
		have := map[string]bool{}
		// Every record appended to the file since the log's release mark
		// is one of rs, so the file's last len(rs) messages hold every
		// record of rs it has (a few more for margin); no early stop.
		s, err := j.store.TailMessages(key, len(rs)+16, 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replaying the write-ahead log into %s: %w", key, err)
		}
		if s != nil {
			for _, r := range s.Records {
				have[recordID(r)] = true
			}
		}
		var missing []session.Record
		for _, r := range rs {
			if id := recordID(r); !have[id] {
				have[id] = true
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if err := j.store.Append(context.Background(), key, missing...); err != nil {
			return fmt.Errorf("replaying the write-ahead log into %s: %w", key, err)
		}
		written += len(missing)
	}
	j.log.Info("session files brought up to date from the write-ahead log", "records", len(recs), "written", written)
	return nil
}

// append makes recs durable in the log, then hands them to the session
// store (kept in memory until the checkpoint or a read writes them). An
// error means the records may or may not be logged: the caller treats
// them as not written.
func (j *journal) append(ctx context.Context, key string, recs []session.Record) error {
	// One buffer: the log's record is the key and the lines, the session
	// file gets the lines. Both copy them (the log into its batch, the
	// session store into its pending lines), so the buffer is reused.
	bp := payloads.Get().(*[]byte)
	payload := append(append((*bp)[:0], key...), '\n')
	payload, err := session.AppendRecordLines(payload, recs)
	if err != nil {
		payloads.Put(bp)
		return fmt.Errorf("session: append %s: %w", key, err)
	}
	err = j.appendPayload(ctx, key, payload, len(recs))
	if err == nil && cap(payload) <= maxPooledPayload {
		// An error may leave the bytes with a session store writer that
		// gave up waiting (ctx): then they are not reused.
		*bp = payload[:0]
		payloads.Put(bp)
	}
	return err
}

// payloads are append's buffers (*[]byte): the key and the encoded lines
// of one append, kept for the next unless over maxPooledPayload.
var payloads = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledPayload = 64 << 10

// appendPayload logs payload (the key, a newline and n records' lines)
// and hands the lines to the session store.
func (j *journal) appendPayload(ctx context.Context, key string, payload []byte, n int) error {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.broken != nil {
		return j.broken
	}
	id := j.begin()
	defer j.end(id)
	if _, err := j.wl.Append(ctx, payload); err != nil {
		if errors.Is(err, wal.ErrFailed) {
			j.failed.Store(true)
		}
		return err
	}
	return j.store.AppendEncoded(ctx, key, payload[len(key)+1:], n)
}

// begin registers an append in flight: the checkpointer releases nothing
// at or above the log's next LSN now.
func (j *journal) begin() uint64 {
	j.fmu.Lock()
	defer j.fmu.Unlock()
	j.flights = append(j.flights, flight{floor: j.wl.Next()})
	return j.seq + uint64(len(j.flights)-1-j.off)
}

// flight is an append in flight (begin), done once it ended.
type flight struct {
	floor wal.LSN
	done  bool
}

// end ends the append begin numbered id. The oldest append in flight
// holds the lowest floor; those ended before it wait behind it.
func (j *journal) end(id uint64) {
	j.fmu.Lock()
	defer j.fmu.Unlock()
	j.flights[j.off+int(id-j.seq)].done = true
	for j.off < len(j.flights) && j.flights[j.off].done {
		j.off++
		j.seq++
	}
	switch {
	case j.off == len(j.flights):
		j.flights, j.off = j.flights[:0], 0
	case j.off >= 256 && 2*j.off >= len(j.flights):
		n := copy(j.flights, j.flights[j.off:])
		j.flights, j.off = j.flights[:n], 0
	}
}

// floor is the log's Next when the oldest append in flight began (ok
// false: none is); fmu is held.
func (j *journal) floor() (lsn wal.LSN, ok bool) {
	if j.off == len(j.flights) {
		return 0, false
	}
	return j.flights[j.off].floor, true
}

// checkpoint syncs the session files and releases the log up to the last
// record every one of which is in its session file.
func (j *journal) checkpoint() error {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.broken != nil {
		return nil
	}
	j.fmu.Lock()
	upTo := j.wl.Next() - 1
	if f, ok := j.floor(); ok {
		upTo = min(upTo, f-1)
	}
	j.fmu.Unlock()
	upTo = min(upTo, j.wl.Durable())
	if err := j.store.Sync(); err != nil {
		// The lines stay pending and the log keeps them.
		msg := err.Error()
		j.syncErr.Store(&msg)
		j.onSyncFail()
		return err
	}
	if j.syncErr.Load() != nil {
		j.syncErr.Store(nil)
		j.log.Info("session files writable again")
	}
	return j.wl.Release(upTo)
}

// reopen replaces a failed log: appends wait for it.
func (j *journal) reopen() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.broken == nil {
		// First attempt: what the log synced is in the session store
		// (appends hold the read lock until it took them); write it to
		// the files, make that durable and release it, so only the
		// failed batch is left. If the files cannot take it, the log
		// must keep it: retried later.
		if err := j.store.Sync(); err != nil {
			return fmt.Errorf("writing the session files before reopening the log: %w", err)
		}
		_ = j.wl.Release(j.wl.Durable())
		err := j.wl.Close()
		j.broken = fmt.Errorf("%w (reopening)", err)
		if err == nil {
			j.broken = fmt.Errorf("%w: reopening", wal.ErrFailed)
		}
	}
	wl, err := j.open(false)
	if err != nil {
		return err
	}
	j.prior = j.stats()
	j.wl, j.broken = wl, nil
	j.failed.Store(false)
	j.log.Info("write-ahead log reopened after a failure")
	return nil
}

// stats are the log's counters since the server started, across reopens;
// Segments is the current log's. The caller holds mu (either way).
func (j *journal) stats() wal.Stats {
	s := j.wl.Stats()
	s.Appends += j.prior.Appends
	s.Batches += j.prior.Batches
	s.Syncs += j.prior.Syncs
	return s
}

// Stats is stats for /metrics.
func (j *journal) Stats() wal.Stats {
	j.mu.RLock()
	defer j.mu.RUnlock()
	return j.stats()
}

// checkpointer checkpoints every checkpointInterval and reopens a failed
// log with a backoff, until close.
func (j *journal) checkpointer() {
	defer close(j.done)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = 0
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	poll := time.NewTicker(20 * time.Millisecond) // notices a failure soon
	defer poll.Stop()
	waiting := false
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			if err := j.checkpoint(); err != nil {
				j.log.Warn("write-ahead log checkpoint failed; retrying", "err", err)
			}
		case <-poll.C:
			if j.failed.Load() && !waiting {
				waiting = true
				retry.Reset(b.NextBackOff())
			}
		case <-retry.C:
			waiting = false
			if err := j.reopen(); err != nil {
				j.log.Error("cannot reopen the write-ahead log; retrying", "err", err)
				continue
			}
			b.Reset()
		}
	}
}

// close stops the checkpointer, makes the session files durable, releases
// the log and closes it. Appends must be over.
func (j *journal) close() error {
	close(j.stop)
	<-j.done
	err := j.checkpoint()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.broken != nil {
		return err
	}
	return errors.Join(err, j.wl.Close())
}
