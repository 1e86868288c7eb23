package registry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"termlink/internal/durable"
	"termlink/server/wal"
)

// On disk (see the package doc): dir/snapshot.jsonl and the log dir/wal.
const (
	snapshotFile    = "snapshot.jsonl"
	walDir          = "wal"
	snapshotVersion = 2
	logSegmentBytes = 4 << 20 // released segments are deleted
	recordItems     = 256     // devices per log record
	snapshotChunk   = 512     // devices copied per hold of the lock
)

// stored is one device as the snapshot and the log keep it. Times are
// Unix seconds (the registry shows them to the second).
type stored struct {
	Channel       string            `json:"ch"`
	PeerID        string            `json:"peer_id"`
	SessionID     string            `json:"session_id"`
	DeviceName    string            `json:"device_name,omitempty"`
	Board         string            `json:"board,omitempty"`
	Version       string            `json:"version,omitempty"`
	Platform      string            `json:"platform,omitempty"`
	Settings      int64             `json:"settings_version,omitempty"`
	BinarySHA256  string            `json:"binary_sha256,omitempty"`
	Capabilities  []string          `json:"capabilities,omitempty"`
	Tags          map[string]string `json:"tags,omitempty"`
	RemoteAddr    string            `json:"remote_addr,omitempty"`
	Authenticated bool              `json:"authenticated,omitempty"`
	Shared        string            `json:"shared,omitempty"` // the glob of its shared token
	LastSeen      int64             `json:"seen"`
	LastMessageAt int64             `json:"msg,omitempty"`
	Reconnects    []minuteCount     `json:"reconnects,omitempty"`
	// What fleet parts wrote of it: its last update's state, why it
	// refused its last pushed settings.
	Update        *UpdateState `json:"update,omitempty"`
	SettingsError string       `json:"settings_error,omitempty"`
	Health        *Health      `json:"health,omitempty"` // its last health report
}

// peerRef names a forgotten device.
type peerRef struct {
	Channel string `json:"ch"`
	PeerID  string `json:"peer_id"`
}

// seenRec is a device's times only.
type seenRec struct {
	Channel       string `json:"ch"`
	PeerID        string `json:"peer_id"`
	LastSeen      int64  `json:"seen"`
	LastMessageAt int64  `json:"msg,omitempty"`
}

// logRecord is one record of the log: devices forgotten, written whole,
// and whose times changed, applied in that order.
type logRecord struct {
	Del  []peerRef `json:"del,omitempty"`
	Put  []stored  `json:"put,omitempty"`
	Seen []seenRec `json:"seen,omitempty"`
}

type snapshotHeader struct {
	Version int    `json:"version"`
	LSN     uint64 `json:"lsn"`
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func timeOf(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0).UTC()
}

// storedOf is e as kept on disk; seen is its last_seen (now while online).
func storedOf(e *entry, seen time.Time) stored {
	d := e.dev
	return stored{Channel: d.ChannelID, PeerID: d.PeerID, SessionID: d.SessionID, DeviceName: d.DeviceName, Board: d.Board,
		Version: d.Version, Platform: d.Platform, Settings: d.SettingsVersion, BinarySHA256: d.BinarySHA256, Capabilities: d.Capabilities, Tags: d.Tags, RemoteAddr: d.RemoteAddr, Authenticated: d.Authenticated,
		Shared: d.Shared, LastSeen: unixOrZero(seen), LastMessageAt: unixOrZero(e.lastMessage.time()), Reconnects: e.reconnects(),
		Update: e.ex().update, SettingsError: e.ex().settingsError, Health: e.ex().health}
}

// putLocked applies a stored device (load and replay; r.mu held or not
// yet shared).
func (r *Registry) putLocked(s stored) {
	if s.Channel == "" || s.PeerID == "" {
		return
	}
	d, _ := sanitize(Device{ChannelID: s.Channel, PeerID: s.PeerID, SessionID: s.SessionID, DeviceName: s.DeviceName,
		Board: s.Board, Version: s.Version, Platform: s.Platform, SettingsVersion: s.Settings, BinarySHA256: s.BinarySHA256, Capabilities: s.Capabilities, Tags: s.Tags, RemoteAddr: s.RemoteAddr,
		Authenticated: s.Authenticated, Shared: s.Shared})
	e := &entry{dev: d, since: stampOf(timeOf(s.LastSeen)), lastMessage: stampOf(timeOf(s.LastMessageAt))}
	e.setReconnects(s.Reconnects)
	if r := boundReason(s.SettingsError); r != "" {
		e.extra().settingsError = r
	}
	if s.Update != nil {
		u := boundUpdate(*s.Update)
		e.extra().update = &u
	}
	if s.Health != nil {
		h := boundHealth(*s.Health)
		e.extra().health = &h
	}
	x := e.ex()
	e.bytes = int32(peerBytes(d) + stateBytes(x.update, x.settingsError) + healthBytes(x.health))
	cs := r.channel(s.Channel)
	cs.removeLocked(s.PeerID)
	cs.addLocked(e)
}

func (r *Registry) applyLocked(rec *logRecord) {
	for _, d := range rec.Del {
		if cs := r.channels[d.Channel]; cs != nil {
			cs.removeLocked(d.PeerID)
		}
	}
	for _, s := range rec.Put {
		r.putLocked(s)
	}
	for _, s := range rec.Seen {
		if cs := r.channels[s.Channel]; cs != nil {
			if e := cs.peers[s.PeerID]; e != nil {
				e.since, e.lastMessage = stampOf(timeOf(s.LastSeen)), stampOf(timeOf(s.LastMessageAt)) // loaded: offline
			}
		}
	}
}

// load reads the snapshot, an earlier format's files and the log, and
// removes what a kill left (r is not shared yet).
func (r *Registry) load() error {
	r.removeTemps()
	snapLSN, err := r.loadSnapshot()
	if err != nil {
		return err
	}
	legacy, err := r.loadLegacy()
	if err != nil {
		return err
	}
	replayed := 0
	wl, err := wal.Open(filepath.Join(r.dir, walDir), r.walOptions(), func(lsn wal.LSN, p []byte) error {
		if uint64(lsn) <= snapLSN {
			return nil // the snapshot holds it
		}
		var rec logRecord
		if err := json.Unmarshal(p, &rec); err != nil {
			r.log.Warn("device registry log: skipping a record that does not decode", "lsn", lsn, "err", err)
			return nil
		}
		r.applyLocked(&rec)
		replayed += len(p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("registry: opening the log: %w", err)
	}
	r.wl = wl
	r.sinceSnap = replayed
	for _, cs := range r.channels { // what was read is on disk
		cs.resetDirtyLocked()
	}
	if len(legacy) > 0 {
		if err := r.snapshot(); err != nil {
			_ = wl.Close()
			return err
		}
		for _, name := range legacy {
			if err := os.Remove(name); err != nil {
				r.log.Warn("device registry: removing a file of the earlier format after its snapshot", "file", name, "err", err)
			}
		}
	}
	return nil
}

func (r *Registry) walOptions() wal.Options {
	return wal.Options{NoSync: r.opt.NoSync, Logger: r.log, SegmentBytes: logSegmentBytes}
}

// removeTemps removes the temporary files a kill during a snapshot (or
// the log's release mark) left behind.
func (r *Registry) removeTemps() {
	names, _ := filepath.Glob(filepath.Join(r.dir, ".*.tmp"))
	more, _ := filepath.Glob(filepath.Join(r.dir, walDir, "*.tmp"))
	for _, name := range append(names, more...) {
		if err := os.Remove(name); err != nil {
			r.log.Warn("device registry: removing a temporary file left by an earlier run", "file", name, "err", err)
		} else {
			r.log.Info("device registry: removed a temporary file left by an earlier run", "file", name)
		}
	}
}

// loadSnapshot reads snapshot.jsonl, if any, and returns its LSN. A
// snapshot whose header does not read is moved aside; a device line that
// does not read is skipped, with a warning.
func (r *Registry) loadSnapshot() (uint64, error) {
	name := filepath.Join(r.dir, snapshotFile)
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("registry: reading %s: %w", name, err)
	}
	defer f.Close()
	st, _ := f.Stat()
	if st != nil {
		r.snapBytes = int(st.Size())
	}
	br := bufio.NewReaderSize(f, 256<<10)
	var h snapshotHeader
	line, err := readLine(br)
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err == nil && h.Version != snapshotVersion {
		err = fmt.Errorf("version %d, want %d", h.Version, snapshotVersion)
	}
	if err != nil {
		f.Close()
		return 0, r.moveAside(name, err)
	}
	bad := 0
	for n := 2; ; n++ {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("registry: reading %s: %w", name, err)
		}
		var s stored
		if err := json.Unmarshal(line, &s); err != nil || s.Channel == "" || s.PeerID == "" {
			if bad == 0 {
				r.log.Warn("device registry snapshot: skipping a line that does not read", "file", name, "line", n, "err", err)
			}
			bad++
			continue
		}
		r.putLocked(s)
	}
	if bad > 0 {
		r.log.Warn("device registry snapshot: lines skipped", "file", name, "count", bad)
	}
	return h.LSN, nil
}

// readLine returns the next line without its newline; a last line without
// one is returned too.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadBytes('\n')
	if len(line) > 0 && (err == nil || errors.Is(err, io.EOF)) {
		return bytes.TrimSuffix(line, []byte("\n")), nil
	}
	return nil, err
}

func (r *Registry) moveAside(name string, why error) error {
	aside := name + ".corrupt-" + time.Now().UTC().Format("20060102T150405")
	r.log.Warn("device registry file unreadable; moved aside, its devices are forgotten", "file", name, "moved_to", aside, "err", why)
	if err := os.Rename(name, aside); err != nil {
		return fmt.Errorf("registry: moving aside unreadable %s: %w", name, err)
	}
	return nil
}

// legacyFile is a registry file of the earlier format: registry/<channel>.json.
type legacyFile struct {
	Version   int    `json:"version"`
	ChannelID string `json:"channel_id"`
	Peers     []struct {
		stored
		LastSeen      time.Time   `json:"last_seen"`
		LastMessageAt time.Time   `json:"last_message_at"`
		Reconnects    []time.Time `json:"reconnects"`
	} `json:"peers"`
}

// loadLegacy reads the files of the earlier format and returns their
// names (to remove once a snapshot holds them).
func (r *Registry) loadLegacy() ([]string, error) {
	names, err := filepath.Glob(filepath.Join(r.dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("registry: listing %s: %w", r.dir, err)
	}
	var read []string
	for _, name := range names {
		var f legacyFile
		b, err := os.ReadFile(name)
		if err == nil {
			err = json.Unmarshal(b, &f)
		}
		switch {
		case err != nil:
		case f.Version != 1:
			err = fmt.Errorf("version %d, want 1", f.Version)
		case f.ChannelID == "" || filepath.Base(name) != f.ChannelID+".json":
			err = fmt.Errorf("channel_id %q does not match the file name", f.ChannelID)
		}
		if err != nil {
			if err := r.moveAside(name, err); err != nil {
				return nil, err
			}
			continue
		}
		for _, p := range f.Peers {
			s := p.stored
			s.Channel, s.LastSeen, s.LastMessageAt = f.ChannelID, unixOrZero(p.LastSeen), unixOrZero(p.LastMessageAt)
			for _, t := range p.Reconnects {
				s.Reconnects = addReconnect(s.Reconnects, t)
			}
			r.putLocked(s)
		}
		read = append(read, name)
	}
	return read, nil
}

func (r *Registry) flusher() {
	defer close(r.done)
	t := time.NewTicker(r.opt.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			if err := r.flush(false); err != nil {
				r.log.Error("writing the device registry", "err", err)
			}
		}
	}
}

// Flush writes the devices changed since the last flush (and, once a
// minute, the times of online devices) to the log, and a snapshot when
// enough was logged.
func (r *Registry) Flush() error { return r.flush(false) }

// flush is Flush; all also writes the times of every online device.
func (r *Registry) flush(all bool) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	now := r.now()
	var recs []*logRecord
	cur := &logRecord{}
	add := func() *logRecord {
		if len(cur.Del)+len(cur.Put)+len(cur.Seen) >= recordItems {
			recs = append(recs, cur)
			cur = &logRecord{}
		}
		return cur
	}
	r.mu.Lock()
	full := all || now.Sub(r.lastFull) >= lastSeenEvery
	if full {
		r.lastFull = now
	}
	for id, cs := range r.channels {
		for peer := range cs.deleted {
			c := add()
			c.Del = append(c.Del, peerRef{Channel: id, PeerID: peer})
		}
		for peer, what := range cs.dirty {
			e := cs.peers[peer]
			if e == nil {
				continue
			}
			seen := e.since.time() // offline: last seen
			if e.online {
				seen = now
			}
			if what == dirtyFull {
				c := add()
				c.Put = append(c.Put, storedOf(e, seen))
			} else {
				c := add()
				c.Seen = append(c.Seen, seenRec{Channel: id, PeerID: peer, LastSeen: unixOrZero(seen), LastMessageAt: unixOrZero(e.lastMessage.time())})
			}
		}
		if full {
			for peer, e := range cs.peers {
				if e.online && cs.dirty[peer] == 0 {
					c := add()
					c.Seen = append(c.Seen, seenRec{Channel: id, PeerID: peer, LastSeen: now.Unix(), LastMessageAt: unixOrZero(e.lastMessage.time())})
				}
			}
		}
		cs.resetDirtyLocked()
	}
	r.mu.Unlock()
	if len(cur.Del)+len(cur.Put)+len(cur.Seen) > 0 {
		recs = append(recs, cur)
	}
	if r.needSnap || r.walErr != nil {
		return r.snapshot() // it holds everything in memory, these too
	}
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	for _, rec := range recs {
		buf.Reset()
		if err := enc.Encode(rec); err != nil {
			return fmt.Errorf("registry: encoding a log record: %w", err)
		}
		// Not cancellable: the flusher owns the log and waits for its
		// write; a record it abandoned might land after a later one.
		if _, err := r.wl.Append(context.Background(), buf.Bytes()); err != nil {
			r.needSnap = true // what was not logged is written by the next snapshot
			if errors.Is(err, wal.ErrFailed) {
				r.walErr = err
			}
			return fmt.Errorf("registry: writing the log: %w", err)
		}
		r.sinceSnap += buf.Len()
	}
	if r.sinceSnap >= max(r.opt.SnapshotBytes, r.snapBytes) {
		return r.snapshot()
	}
	return nil
}

// snapshot writes every device to snapshot.jsonl and releases the log up
// to what it holds (r.writeMu held). It copies the devices a chunk at a
// time, so a change may land in the snapshot or not; every change after
// the LSN it records is logged after it and replayed over it.
func (r *Registry) snapshot() error {
	if r.walErr != nil { // reopen: it re-reads what is on disk
		_ = r.wl.Close()
		wl, err := wal.Open(filepath.Join(r.dir, walDir), r.walOptions(), func(wal.LSN, []byte) error { return nil })
		if err != nil {
			return fmt.Errorf("registry: reopening the failed log: %w", err)
		}
		r.wl, r.walErr = wl, nil
	}
	lsn := r.wl.Durable()
	r.mu.Lock()
	chans := make([]string, 0, len(r.channels))
	for id := range r.channels {
		chans = append(chans, id)
	}
	r.mu.Unlock()
	slices.Sort(chans)
	size := 0
	err := durable.WriteFile(filepath.Join(r.dir, snapshotFile), func(w *bufio.Writer) error {
		cw := &countingWriter{w: w}
		var buf bytes.Buffer
		enc := newEncoder(&buf)
		if err := enc.Encode(snapshotHeader{Version: snapshotVersion, LSN: uint64(lsn)}); err != nil {
			return err
		}
		batch := make([]stored, 0, snapshotChunk)
		for _, ch := range chans {
			r.mu.Lock()
			ids := r.channels[ch].sortedIDs() // replaced, never changed: safe to read unlocked
			r.mu.Unlock()
			for len(ids) > 0 {
				chunk := ids[:min(snapshotChunk, len(ids))]
				ids = ids[len(chunk):]
				batch = batch[:0]
				now := r.now()
				r.mu.Lock()
				cs := r.channels[ch]
				for _, id := range chunk {
					if e := cs.peers[id]; e != nil {
						seen := e.since.time() // offline: last seen
						if e.online {
							seen = now
						}
						batch = append(batch, storedOf(e, seen))
					}
				}
				r.mu.Unlock()
				for i := range batch {
					if err := enc.Encode(&batch[i]); err != nil {
						return err
					}
				}
				if _, err := cw.Write(buf.Bytes()); err != nil {
					return err
				}
				buf.Reset()
			}
		}
		if _, err := cw.Write(buf.Bytes()); err != nil {
			return err
		}
		size = cw.n
		return nil
	}, r.opt.NoSync)
	if err != nil {
		r.needSnap = true
		return fmt.Errorf("registry: writing the snapshot: %w", err)
	}
	r.snapBytes, r.sinceSnap, r.needSnap = size, 0, false
	if err := r.wl.Release(lsn); err != nil {
		return fmt.Errorf("registry: releasing the log: %w", err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}
