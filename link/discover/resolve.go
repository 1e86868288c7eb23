package discover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// SavedURLFile is the file in the state dir that keeps the last URL found
// on the LAN, for the next start when nothing answers.
const SavedURLFile = "server-url"

// Options tell Resolve what to look for and what to fall back to.
type Options struct {
	Browse   BrowseOptions
	Name     string // pick the instance with this name; "": the first that answered
	Channel  string // prefer this channel's path when a server serves several
	Fallback string // channel URL used when nothing answers; "": the saved one
	StateDir string // where SavedURLFile lives; "": nothing saved or read
	// Show puts a short line on the device's display (16 columns fit);
	// nil: nowhere.
	Show   func(text string)
	Logger *slog.Logger
}

// Source says where a Resolve's URL came from.
type Source string

const (
	FromLAN      Source = "mdns"     // a server answered on the LAN
	FromFallback Source = "fallback" // Options.Fallback
	FromSaved    Source = "saved"    // the state dir's last-known URL
)

// Result is the URL Resolve settled on and how.
type Result struct {
	URL    string
	Source Source
	Found  []Found // everything that answered
	Picked Found   // the server used, when Source is FromLAN
	Why    string  // for a fallback: what the LAN gave
}

// Resolve browses the LAN for a termserver and returns its channel URL;
// when none (or none named Options.Name) answers it returns
// Options.Fallback, else the URL saved by the last successful Resolve.
// Every server found is logged; the outcome is logged and shown. A URL
// found on the LAN is saved in the state dir (failure to save is logged,
// not fatal).
func Resolve(ctx context.Context, o Options) (Result, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	show := o.Show
	if show == nil {
		show = func(string) {}
	}
	show("finding server")
	log.Info("browsing the LAN for a termserver", "service", Service, "window", windowOf(o.Browse), "name", o.Name)
	found, err := Browse(ctx, o.Browse)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("finding a termserver on the LAN: %w", err)
		}
		log.Warn("mDNS browse failed", "err", err)
	}
	for _, f := range found {
		if f.Err != nil {
			log.Warn("termserver found with a bad TXT record; skipped", "instance", f.Instance, "addr", f.HostPort(), "err", f.Err)
			continue
		}
		log.Info("termserver found", "instance", f.Instance, "host", f.Host, "addr", f.HostPort(),
			"path", strings.Join(f.TXT.Paths, ","), "tls", f.TXT.TLS, "enroll", f.TXT.Enroll)
	}
	res := Result{Found: found}
	if err == nil {
		picked, perr := Pick(found, o.Name)
		if perr == nil {
			res.URL, res.Source, res.Picked = picked.URL(o.Channel), FromLAN, picked
			log.Info("using the termserver found on the LAN", "instance", picked.Instance, "url", res.URL)
			show(clip("found " + picked.Instance))
			if o.StateDir != "" {
				if err := saveURL(o.StateDir, res.URL); err != nil {
					log.Warn("last-known server URL not saved", "err", err)
				}
			}
			return res, nil
		}
		err = perr
	}
	res.Why = err.Error()
	switch {
	case o.Fallback != "":
		res.URL, res.Source = o.Fallback, FromFallback
	case o.StateDir != "":
		saved, serr := loadURL(o.StateDir)
		if serr != nil {
			return res, fmt.Errorf("%s on the LAN (%s) and no --server-fallback; the last-known URL: %w", res.Why, Service, serr)
		}
		res.URL, res.Source = saved, FromSaved
	default:
		return res, fmt.Errorf("%s on the LAN (%s) and no --server-fallback", res.Why, Service)
	}
	log.Warn("no termserver found on the LAN; falling back", "why", res.Why, "source", string(res.Source), "url", res.URL)
	show(clip("none; " + string(res.Source)))
	return res, nil
}

func windowOf(o BrowseOptions) string {
	if o.Window > 0 {
		return o.Window.String()
	}
	return DefaultWindow.String()
}

// clip keeps a display line to 16 columns.
func clip(s string) string {
	if r := []rune(s); len(r) > 16 {
		return string(r[:16])
	}
	return s
}

// saveURL writes u to the state dir atomically, mode 0600.
func saveURL(dir, u string) error {
	tmp, err := os.CreateTemp(dir, SavedURLFile+".tmp*")
	if err != nil {
		return fmt.Errorf("saving the server URL: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	if _, err := tmp.WriteString(u + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("saving the server URL: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("saving the server URL: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving the server URL: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, SavedURLFile)); err != nil {
		return fmt.Errorf("saving the server URL: %w", err)
	}
	return nil
}

// loadURL reads the saved URL and checks it is a ws:// or wss:// URL.
func loadURL(dir string) (string, error) {
	path := filepath.Join(dir, SavedURLFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("none saved yet (%s)", path)
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	s := strings.TrimSpace(string(b))
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return "", fmt.Errorf("%s holds %q: not a ws:// or wss:// URL", path, s)
	}
	return s, nil
}
