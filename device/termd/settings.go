package termd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"termlink/device"
	"termlink/device/activity"
	"termlink/internal/durable"
	"termlink/internal/strictjson"
	"termlink/link"
)

// Settings pushed by the server (issue 28): a settings frame is checked,
// applied live (the kiosk's idle screen, backlight and notice time, the
// log level, the tags of the next connect), kept in the state dir
// (settings.json) and acked; a frame with a value termd cannot apply is
// acked with the reason and changes nothing. Each frame is complete: a
// field it leaves out falls back to termd's own value, so the
// precedence, field by field, is
//
//	pushed settings > the command line (--idle-seconds, --idle-text,
//	--backlight-off-after, --log-level, --tag) > the board's kiosk block
//
// (an operator who deletes a document gives the device its own values
// back). On start the kept settings are applied before the first
// connect, which says their version (settings_version). A state dir
// that cannot be written does not stop them: they are applied in memory,
// acked, and the reason is logged; the next start has the ones kept
// before.

// settingsFileName is the applied settings in the state dir.
const settingsFileName = "settings.json"

// maxSettingsBytes bounds settings.json.
const maxSettingsBytes = 64 << 10

// settingsKeys are the fields of settings.json (link.Settings').
var settingsKeys = []string{"version", "idle_text", "idle_seconds", "backlight_off_after", "notice_seconds", "busy_seconds", "log_level", "tags"}

// pushed is termd's pushed settings: its own values (the command line
// over the board) and the settings applied over them.
type pushed struct {
	dir       string // the state dir
	baseKiosk device.Kiosk
	baseLevel slog.Level
	baseTags  map[string]string
	level     *slog.LevelVar // the log's
	log       *slog.Logger

	mu      sync.Mutex
	applied *link.Settings    // nil: none
	tracker *activity.Tracker // the device's use (busy.go): busy_seconds sets its key window
}

// loadSettings reads the settings kept in the state dir, if any, and
// sets the log level from them. A file that does not parse is logged and
// left out (the server sends the settings again: settings_version 0).
func (s *setup) loadSettings() {
	p := &pushed{dir: s.cfg.StateDir, baseKiosk: kiosk(s.cfg, s.profile), baseLevel: s.cfg.LogLevel,
		baseTags: s.cfg.Tags, level: s.level, log: s.log}
	s.settings = p
	b, err := readSettingsFile(filepath.Join(p.dir, settingsFileName))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		var f *link.Settings
		if f, err = parseSettings(b); err == nil {
			p.applied = f
			p.level.Set(p.levelFor(f))
			s.log.Info("settings kept in the state dir applied", "version", f.Version)
			return
		}
	}
	s.log.Error("settings kept in the state dir not used: termd's own apply until the server sends them again",
		"file", filepath.Join(p.dir, settingsFileName), "err", err)
}

// readSettingsFile reads at most maxSettingsBytes+1 of path (more is
// refused by parseSettings).
func readSettingsFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxSettingsBytes+1))
}

// version is the applied settings' version (0: none).
func (p *pushed) version() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.applied == nil {
		return 0
	}
	return p.applied.Version
}

// kiosk is the kiosk config with the applied settings.
func (p *pushed) kiosk() device.Kiosk {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kioskFor(p.applied)
}

// tags are the tags of the next connect.
func (p *pushed) tags() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tagsFor(p.applied)
}

func (p *pushed) kioskFor(f *link.Settings) device.Kiosk {
	k := p.baseKiosk
	if f == nil {
		return k
	}
	if f.IdleText != nil {
		k.IdleText = *f.IdleText
	}
	if f.IdleSeconds != nil {
		k.IdleAfter = time.Duration(*f.IdleSeconds) * time.Second
	}
	if f.BacklightOffAfter != nil {
		k.BacklightOffAfter = time.Duration(*f.BacklightOffAfter) * time.Second
	}
	if f.NoticeSeconds != nil {
		k.NoticeSeconds = *f.NoticeSeconds
	}
	return k
}

func (p *pushed) levelFor(f *link.Settings) slog.Level {
	if f == nil || f.LogLevel == "" {
		return p.baseLevel
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(f.LogLevel)) // checked: debug, info, warn or error
	return l
}

func (p *pushed) tagsFor(f *link.Settings) map[string]string {
	if f == nil || len(f.Tags) == 0 {
		return p.baseTags
	}
	return f.Tags
}

// settingsHandler is the handler of settings frames (always: every
// termd takes them). A nil client: only that there is one (fleetCaps).
func (s *setup) settingsHandler(client *link.Client, d *device.Daemon) func(context.Context, *link.Settings) {
	if client == nil || s.settings == nil {
		return func(context.Context, *link.Settings) {}
	}
	p := s.settings
	return func(_ context.Context, f *link.Settings) {
		p.apply(f, d, client.SetTags, func(ack *link.SettingsAck) {
			if err := client.Report(ack); err != nil {
				p.log.Warn("settings ack not sent", "version", ack.Version, "err", err)
			}
		})
	}
}

// apply applies one settings frame and acks it.
func (p *pushed) apply(f *link.Settings, d *device.Daemon, setTags func(map[string]string), ack func(*link.SettingsAck)) {
	if field, msg := checkSettings(f); field != "" {
		reason := field + ": " + msg
		p.log.Warn("pushed settings refused", "version", f.Version, "reason", reason)
		ack(&link.SettingsAck{Version: f.Version, Error: reason})
		return
	}
	if d != nil && !d.SetKiosk(p.kioskFor(f)) {
		reason := "the display did not take the kiosk change (too many changes wait); the settings stay as they were"
		p.log.Warn("pushed settings not applied", "version", f.Version, "reason", reason)
		ack(&link.SettingsAck{Version: f.Version, Error: reason})
		return
	}
	p.level.Set(p.levelFor(f))
	setTags(p.tagsFor(f))
	p.mu.Lock()
	p.applied = f
	t := p.tracker
	p.mu.Unlock()
	if t != nil {
		t.SetKeyWindow(keyWindowFor(f))
	}
	if err := p.keep(f); err != nil {
		p.log.Error("pushed settings applied in memory, not kept in the state dir: the next start has the ones kept before", "version", f.Version, "err", err)
	}
	p.log.Info("pushed settings applied", "version", f.Version)
	ack(&link.SettingsAck{Version: f.Version})
}

// keep writes f to the state dir's settings.json.
func (p *pushed) keep(f *link.Settings) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(p.dir, settingsFileName), func(w *bufio.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}, false)
}

// parseSettings parses settings.json strictly: one JSON object, valid
// UTF-8, no key twice, no unknown field, every value as checkSettings
// takes it.
func parseSettings(b []byte) (*link.Settings, error) {
	if len(b) > maxSettingsBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", len(b), maxSettingsBytes)
	}
	if !utf8.Valid(b) {
		return nil, errors.New("not valid UTF-8")
	}
	root, err := strictjson.Parse(b)
	if err != nil {
		return nil, err
	}
	if root.Kind != strictjson.Object {
		return nil, fmt.Errorf("want a JSON object, got %s", root.Kind)
	}
	if k := dupKey(root); k != "" {
		return nil, fmt.Errorf("key %q given twice", k)
	}
	for _, k := range root.Keys { // encoding/json would take "Idle_Text" for idle_text
		if !slices.Contains(settingsKeys, k) {
			return nil, fmt.Errorf("unknown field %q (known: %s)", k, strings.Join(settingsKeys, ", "))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f link.Settings
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("something follows the object")
	}
	if field, msg := checkSettings(&f); field != "" {
		return nil, fmt.Errorf("%s: %s", field, msg)
	}
	if len(f.Tags) == 0 {
		f.Tags = nil // kept as the device's own, as on the wire
	}
	return &f, nil
}

// dupKey is a key given twice in any object under n, or "".
func dupKey(n *strictjson.Node) string {
	if len(n.Dups) > 0 {
		return n.Dups[0]
	}
	for _, v := range append(n.Vals, n.Elems...) {
		if k := dupKey(v); k != "" {
			return k
		}
	}
	return ""
}

// checkSettings says which value of f termd cannot apply, and why (the
// bounds both ends hold to).
func checkSettings(f *link.Settings) (field, msg string) { return link.CheckSettings(f) }
