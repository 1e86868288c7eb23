package tlsconf

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"termlink/internal/durable"
	"termlink/link"
)

const (
	// TicketKeysFile is where, under the workspace, the session ticket
	// keys are kept.
	TicketKeysFile   = "tls/ticket-keys"
	ticketKeysHeader = "termlink tls session ticket keys v1"
	// ticketKeyRotation is how long the newest key encrypts new tickets;
	// ticketKeyLifetime how long a key is kept to decrypt the tickets it
	// made: Go's own values for its in-memory keys (crypto/tls), and
	// Go's longest ticket lifetime (a ticket older than 7 days is not
	// resumed whatever its key).
	ticketKeyRotation = 24 * time.Hour
	ticketKeyLifetime = 7 * 24 * time.Hour
	// maxTicketKeys bounds the file when the clock jumps back and forth
	// (a daily rotation keeps 7).
	maxTicketKeys = 10
)

// A ticketKey is a workspace key and its in-memory twin for TLS 1.2
// clients (never written; a new one at each start).
type ticketKey struct {
	created  time.Time
	key, mem [32]byte
}

func newTicketKey(created time.Time) ticketKey {
	k := ticketKey{created: created}
	_, _ = rand.Read(k.key[:]) // never fails (crypto/rand)
	_, _ = rand.Read(k.mem[:])
	return k
}

// tickets keeps the session ticket keys of t.conf in the workspace, so a
// restarted server resumes the sessions of its predecessor: the newest
// key encrypts, every key decrypts.
type tickets struct {
	path string // "": in memory only
	log  *slog.Logger
	now  func() time.Time

	mu       sync.Mutex // one rotation at a time
	keys     []ticketKey
	set      func([][32]byte) // the TLS 1.3 config's SetSessionTicketKeys: the workspace keys
	set12    func([][32]byte) // the TLS 1.2 config's: the in-memory twins
	rotateAt atomic.Int64     // unix ns: when the newest key is due for rotation
	rotating atomic.Bool      // a rotation started by a handshake is running
}

// load reads the key file (a missing one is made), rotates when due and
// hands the keys to set. Nothing here stops the server: a file that does
// not load is replaced by fresh keys (its tickets then miss: full
// handshakes), one that cannot be written leaves the keys in memory.
func (k *tickets) load() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.path != "" {
		keys, err := readTicketKeys(k.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			k.log.Warn("TLS session ticket keys not loaded: writing fresh ones (devices resume no earlier session: a full handshake each)",
				"file", k.path, "err", err)
		default:
			k.keys = keys
			if err := link.CheckPrivateFile(k.path); err != nil {
				k.log.Warn("the TLS session ticket key file is not private", "err", err)
			}
		}
	}
	k.rotateLocked(len(k.keys) == 0)
}

// maybeRotate is the handshake's check: cheap until the newest key is
// due, then one rotation in the background (the handshake does not wait
// for the file).
func (k *tickets) maybeRotate() {
	if k.now().UnixNano() < k.rotateAt.Load() || !k.rotating.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer k.rotating.Store(false)
		k.rotate()
	}()
}

// rotate adds a key when the newest is due and drops the expired ones,
// writing the file when they changed.
func (k *tickets) rotate() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rotateLocked(false)
}

func (k *tickets) rotateLocked(write bool) {
	now := k.now()
	// The file's first key is the newest. A key dated in the future (the
	// clock stepped back) is not trusted to be fresh: rotate.
	if len(k.keys) == 0 || now.Sub(k.keys[0].created) >= ticketKeyRotation || k.keys[0].created.After(now) {
		k.keys = append([]ticketKey{newTicketKey(now)}, k.keys...)
		write = true
	}
	kept := k.keys[:1]
	for _, key := range k.keys[1:] {
		if now.Sub(key.created) < ticketKeyLifetime && len(kept) < maxTicketKeys {
			kept = append(kept, key)
		}
	}
	if len(kept) != len(k.keys) {
		write = true
	}
	k.keys = kept
	if write && k.path != "" {
		if err := writeTicketKeys(k.path, k.keys); err != nil {
			k.log.Warn("TLS session ticket keys kept in memory only: after a restart devices resume no earlier session (a full handshake each)",
				"file", k.path, "err", err)
		}
	}
	raw, mem := make([][32]byte, len(k.keys)), make([][32]byte, len(k.keys))
	for i, key := range k.keys {
		raw[i], mem[i] = key.key, key.mem
	}
	k.set(raw)
	k.set12(mem)
	k.rotateAt.Store(k.keys[0].created.Add(ticketKeyRotation).UnixNano())
}

// readTicketKeys reads the key file: a header line, then one key a line,
// newest first, "<unix seconds created> <64 hex digits>".
func readTicketKeys(path string) ([]ticketKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseTicketKeys(b)
}

// parseTicketKeys reads a key file's text (encodeTicketKeys's format).
func parseTicketKeys(b []byte) ([]ticketKey, error) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[0] != ticketKeysHeader {
		return nil, fmt.Errorf("first line %.40q, want %q", lines[0], ticketKeysHeader)
	}
	var keys []ticketKey
	for i, l := range lines[1:] {
		created, hexKey, ok := strings.Cut(l, " ")
		secs, err := strconv.ParseInt(created, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("line %d: want \"<unix seconds> <64 hex digits>\"", i+2)
		}
		raw, err := hex.DecodeString(hexKey)
		if err != nil {
			return nil, fmt.Errorf("line %d: the key is not hex", i+2)
		}
		if len(raw) != 32 {
			return nil, fmt.Errorf("line %d: the key is %d bytes, want 32", i+2, len(raw))
		}
		k := newTicketKey(time.Unix(secs, 0))
		copy(k.key[:], raw)
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in the file")
	}
	return keys, nil
}

// writeTicketKeys replaces the key file whole (durable.WriteFile: its
// temporary file is 0600), in a 0700 directory.
func writeTicketKeys(path string, keys []ticketKey) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	err := durable.WriteFile(path, func(w *bufio.Writer) error {
		_, err := w.Write(encodeTicketKeys(keys))
		return err
	}, false)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	return err
}

// encodeTicketKeys is the key file's text: the header, then a line per
// key, "<unix seconds> <64 hex digits>", newest first.
func encodeTicketKeys(keys []ticketKey) []byte {
	var buf bytes.Buffer
	buf.WriteString(ticketKeysHeader + "\n")
	for _, k := range keys {
		fmt.Fprintf(&buf, "%d %s\n", k.created.Unix(), hex.EncodeToString(k.key[:]))
	}
	return buf.Bytes()
}
