package local

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"termlink/server/record"
	"termlink/server/record/recordtest"
	"termlink/server/session"
	"termlink/server/wal"
)

// The store of record's contract on the workspace's store: each handle
// opens the session files and the write-ahead log of one workspace
// again (Close writes its last checkpoint; the crash and replay are
// journal_test's and writebehind_test's).
func TestContract(t *testing.T) {
	recordtest.Run(t, func(t *testing.T) recordtest.Store {
		dir := t.TempDir()
		var sessions *session.Store // the open handle's
		return recordtest.Store{
			Open: func(t *testing.T, q *recordtest.Queue) record.Parts {
				ss, err := session.Open(filepath.Join(dir, "sessions"), session.Options{NoSync: true, SyncLater: true,
					WriteBehind: true, Logger: quietLog()})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Open(filepath.Join(dir, "wal"), ss, q, Options{Logger: quietLog(), WAL: wal.Options{NoSync: true},
					DedupePerSession: 1024, DedupeBytes: 1 << 20})
				if err != nil {
					ss.Close()
					t.Fatal(err)
				}
				sessions = ss
				return record.Parts{Store: closing{s, ss}, Joiner: s, InFlight: s, Recoverer: s}
			},
			History: func(t *testing.T, key string) []session.Record {
				sess, err := sessions.Load(key)
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				if err != nil {
					t.Fatal(err)
				}
				return sess.Records
			},
		}
	})
}

// closing closes the session store after the store of record, as the
// server does.
type closing struct {
	*Store
	sessions *session.Store
}

func (c closing) Close() error { return errors.Join(c.Store.Close(), c.sessions.Close()) }
