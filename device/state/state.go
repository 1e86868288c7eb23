// Package state is termd's state dir and the device's peer id kept in it.
//
// The peer id is random, generated once per state dir and kept there
// (file peer_id, replaced with internal/durable); an id already kept stays,
// whatever made it. When the state dir cannot be read or written, the id
// is derived from /etc/machine-id and the state dir's absolute path
// (stable across restarts, different per state dir) until it can be kept.
package state

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"termlink/internal/durable"
)

// PeerIDFile is the name of the peer id's file in the state dir.
const PeerIDFile = "peer_id"

// DefaultDir is the state dir when none is given: systemd's
// StateDirectory= ($STATE_DIRECTORY, its first entry), else
// ~/.local/state/termd, else ./termd-state.
func DefaultDir() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		return strings.Split(d, ":")[0]
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "state", "termd")
	}
	return "termd-state"
}

var peerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// CheckPeerID says why id is not a valid peer id (nil when it is).
func CheckPeerID(id string) error {
	if !peerRE.MatchString(id) {
		return errors.New("use 1-128 of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)")
	}
	return nil
}

// PeerID returns the id kept in dir (whatever made it: an earlier termd
// derived it from /etc/machine-id; it stays), or a new random one that is
// then kept, so two termd with different state dirs never share an id.
// When dir cannot be read or written, the id is derived from the machine
// id and dir's absolute path (stable across restarts, different per state
// dir) and unkept says why it is not in dir.
func PeerID(dir string) (id string, unkept, err error) {
	path := filepath.Join(dir, PeerIDFile)
	b, rerr := os.ReadFile(path)
	if rerr == nil {
		id := strings.TrimSpace(string(b))
		if CheckPeerID(id) != nil {
			return "", nil, fmt.Errorf("%s holds %q, which is not a valid peer id: fix or delete the file", path, id)
		}
		return id, nil, nil
	}
	if !errors.Is(rerr, os.ErrNotExist) {
		id, err := fallbackPeerID(dir)
		if err != nil {
			return "", nil, err
		}
		return id, fmt.Errorf("reading the peer id: %w", rerr), nil
	}
	if id, err = randomPeerID(); err != nil {
		return "", nil, err
	}
	if werr := KeepPeerID(dir, id); werr != nil {
		// Not kept: an id that is the same at the next start instead.
		if id, err = fallbackPeerID(dir); err != nil {
			return "", nil, err
		}
		return id, werr, nil
	}
	return id, nil, nil
}

func randomPeerID() (string, error) {
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("generating a peer id: %w", err)
	}
	return "termd-" + hex.EncodeToString(r[:]), nil
}

// fallbackPeerID is the id of a state dir that cannot keep one: derived
// from /etc/machine-id and the state dir's absolute path, so it stays the
// same across restarts and differs between state dirs; random (for this
// run only) on a machine without a machine id.
func fallbackPeerID(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	b, err := os.ReadFile("/etc/machine-id")
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return randomPeerID()
	}
	sum := sha256.Sum256([]byte("termd peer id\n" + strings.TrimSpace(string(b)) + "\n" + abs))
	return "termd-" + hex.EncodeToString(sum[:6]), nil
}

// KeepPeerID keeps id in dir, replacing the one kept there (durable: a
// crash leaves the old id or the new one).
func KeepPeerID(dir, id string) error {
	err := durable.WriteFile(filepath.Join(dir, PeerIDFile), func(w *bufio.Writer) error {
		_, err := w.WriteString(id + "\n")
		return err
	}, false)
	if err != nil {
		return fmt.Errorf("keeping the peer id: %w", err)
	}
	return nil
}

// KeepPeerIDLater writes id into dir once that works (trying every
// 10 s), unless a peer id appeared there meanwhile, until ctx ends.
func KeepPeerIDLater(ctx context.Context, dir, id string, log *slog.Logger) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if _, err := os.Stat(filepath.Join(dir, PeerIDFile)); err == nil {
			return // kept by someone else; ours stays in use until restart
		}
		if os.MkdirAll(dir, 0o700) == nil && KeepPeerID(dir, id) == nil {
			log.Info("peer id kept in the state dir", "peer_id", id)
			return
		}
	}
}
