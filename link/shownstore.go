package link

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// ShownNoticesFile is the file in the state dir that keeps the ids of the
// notices this device has drawn, so that a notice the server sends again
// (its ack was lost, or termd died between drawing and acking) is acked
// again and never shown twice.
const ShownNoticesFile = "notices_shown.jsonl"

// MaxShownNotices bounds the ids kept; past it the oldest go first (a
// notice the server still resends after that many newer ones were shown
// would be shown again, which a bounded mailbox on the server rules out).
const MaxShownNotices = 1024

// shownRecord is one line of ShownNoticesFile.
type shownRecord struct {
	ID      string `json:"id"`
	Expires string `json:"expires,omitempty"` // RFC 3339; empty: never expires
	Shown   string `json:"shown"`             // RFC 3339, when it was drawn
}

// shownStore is the set of notice ids drawn, kept in the state dir
// (rewritten whole, through a temp file and fsync, at every change: a
// change is one notice drawn, which is rare) and pruned of notices past
// their expiry (the device never shows those anyway). When the state dir
// cannot be written it keeps the set in memory, logs why, and tries the
// file again at the next change, like the outbox's fallback.
type shownStore struct {
	dir, path string
	log       *slog.Logger
	now       func() time.Time
	max       int // MaxShownNotices (tests lower it)

	mu      sync.Mutex
	recs    []shownRecord // oldest first
	ids     map[string]bool
	problem error // why the set is only in memory; nil while durable (or no dir)
}

// openShownStore loads the ids kept in dir ("": memory only). It never
// fails: a file that cannot be read leaves the set in memory.
func openShownStore(dir string, log *slog.Logger, now func() time.Time) *shownStore {
	s := &shownStore{dir: dir, log: log, now: now, max: MaxShownNotices, ids: map[string]bool{}}
	if dir == "" {
		return s
	}
	s.path = filepath.Join(dir, ShownNoticesFile)
	data, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s
	case err != nil:
		s.problem = fmt.Errorf("reading %s: %w", s.path, err)
		log.Error("notices: the shown-notice list cannot be read; keeping it in memory", "err", s.problem)
		return s
	}
	lineNo := 0
	for line := range bytes.Lines(data) {
		lineNo++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r shownRecord
		if err := json.Unmarshal(line, &r); err != nil || r.ID == "" || len(r.ID) > maxOutboxID {
			if err == nil {
				err = errors.New("no valid id")
			}
			log.Warn("notices: skipping a line of the shown-notice list that does not parse", "file", s.path, "line", lineNo, "err", err)
			continue
		}
		s.addLocked(r)
	}
	if s.pruneLocked() {
		s.saveLocked()
	}
	return s
}

// Shown reports whether id was drawn (and has not expired since).
func (s *shownStore) Shown(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// Mark records id as drawn, durably unless the state dir fails (then in
// memory; the returned error says why).
func (s *shownStore) Mark(id string, expires time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids[id] {
		return nil
	}
	r := shownRecord{ID: id, Shown: s.now().UTC().Format(time.RFC3339)}
	if !expires.IsZero() {
		r.Expires = expires.UTC().Format(time.RFC3339Nano)
	}
	s.addLocked(r)
	s.pruneLocked()
	return s.saveLocked()
}

// Len is how many ids are kept.
func (s *shownStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// Problem says why the list is only in memory (nil: durable).
func (s *shownStore) Problem() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.problem
}

func (s *shownStore) addLocked(r shownRecord) {
	if s.ids[r.ID] {
		return
	}
	s.recs = append(s.recs, r)
	s.ids[r.ID] = true
	if over := len(s.recs) - s.max; over > 0 {
		for _, old := range s.recs[:over] {
			delete(s.ids, old.ID)
		}
		s.recs = slices.Delete(s.recs, 0, over)
	}
}

// pruneLocked drops the ids of expired notices; true when it dropped any.
// An expiry that does not parse counts as never (the line was written by
// this code, so it does not happen short of a hand edit).
func (s *shownStore) pruneLocked() bool {
	now := s.now()
	n := len(s.recs)
	s.recs = slices.DeleteFunc(s.recs, func(r shownRecord) bool {
		exp, ok := parseExpiry(r.Expires)
		if ok && !exp.IsZero() && now.After(exp) {
			delete(s.ids, r.ID)
			return true
		}
		return false
	})
	return len(s.recs) != n
}

// saveLocked writes the whole list; on failure it stays in memory.
func (s *shownStore) saveLocked() error {
	if s.path == "" {
		return nil
	}
	var b bytes.Buffer
	for _, r := range s.recs {
		line, _ := json.Marshal(r)
		b.Write(line)
		b.WriteByte('\n')
	}
	err := os.MkdirAll(s.dir, 0o700)
	if err == nil {
		err = writeFileAtomic(s.dir, s.path, b.Bytes(), true)
	}
	if err != nil {
		err = fmt.Errorf("link: notices: storing the shown-notice list: %w", err)
		if s.problem == nil || s.problem.Error() != err.Error() {
			s.log.Error("notices: the state dir cannot be written; keeping the shown-notice list in memory until it can", "err", err)
		}
		s.problem = err
		return err
	}
	if s.problem != nil {
		s.log.Info("notices: the shown-notice list is stored in the state dir again", "file", s.path)
	}
	s.problem = nil
	return nil
}

// parseExpiry parses a notice's expires_at: zero and true for "" (never
// expires), false for a value that is not RFC 3339.
func parseExpiry(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}
