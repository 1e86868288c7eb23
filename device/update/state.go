package update

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"termlink/internal/durable"
	"termlink/internal/textcut"
	"termlink/release"
)

// StateFile is the state file's name in the state dir. Only the
// supervisor writes it (durably: a temporary file renamed over it).
const StateFile = "update.json"

// MaxStateBytes bounds the state file: ParseStatus refuses more.
const MaxStateBytes = 8 << 10

// MaxReasonBytes bounds Failure.Reason.
const MaxReasonBytes = 1024

// Status is the state file: the trial under way, the last update
// installed, the last one that failed.
type Status struct {
	Pending     *Pending  `json:"pending,omitempty"`
	Installed   string    `json:"installed,omitempty"`    // the version the last successful update installed
	InstalledAt time.Time `json:"installed_at,omitzero"`  // when (to the millisecond, as LastFailure.At: which came last is read from them)
	LastFailure *Failure  `json:"last_failure,omitempty"` // the last update given up
}

// Pending is a release staged as EXE.new and on trial.
type Pending struct {
	Version     string    `json:"version"`
	SHA256      string    `json:"sha256"`
	Size        int64     `json:"size"`
	GateSeconds int       `json:"gate_seconds"`       // the health gate
	Attempts    int       `json:"attempts"`           // trials started (a supervisor killed mid-trial starts another)
	Deadline    time.Time `json:"deadline,omitzero"`  // the current trial's end (zero before the first); informational: the supervisor times the gate with a monotonic clock
	Requested   time.Time `json:"requested,omitzero"` // when the worker staged it
}

// Failure is an update given up and why.
type Failure struct {
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseStatus decodes and checks a state file. Unknown fields, a second
// JSON value, and values out of range are refused with the field named.
func ParseStatus(data []byte) (*Status, error) {
	var s Status
	if err := decodeStrict(data, MaxStateBytes, "update state", &s); err != nil {
		return nil, err
	}
	var errs []error
	if s.Installed != "" {
		if err := release.CheckVersion(s.Installed); err != nil {
			errs = append(errs, fmt.Errorf("installed: %w", err))
		}
	}
	if p := s.Pending; p != nil {
		if err := release.CheckVersion(p.Version); err != nil {
			errs = append(errs, fmt.Errorf("pending.version: %w", err))
		}
		if !sha256RE.MatchString(p.SHA256) {
			errs = append(errs, fmt.Errorf("pending.sha256 %q: want 64 lowercase hex digits", p.SHA256))
		}
		if p.Size <= 0 {
			errs = append(errs, fmt.Errorf("pending.size %d: must be positive", p.Size))
		}
		if p.GateSeconds < 1 || p.GateSeconds > 86400 {
			errs = append(errs, fmt.Errorf("pending.gate_seconds %d: want 1 to 86400", p.GateSeconds))
		}
		if p.Attempts < 0 || p.Attempts > 100 {
			errs = append(errs, fmt.Errorf("pending.attempts %d: want 0 to 100", p.Attempts))
		}
	}
	if f := s.LastFailure; f != nil {
		if err := release.CheckVersion(f.Version); err != nil {
			errs = append(errs, fmt.Errorf("last_failure.version: %w", err))
		}
		if f.Reason == "" || len(f.Reason) > MaxReasonBytes || !utf8.ValidString(f.Reason) {
			errs = append(errs, fmt.Errorf("last_failure.reason: want 1 to %d bytes of UTF-8", MaxReasonBytes))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("update state: %w", err)
	}
	return &s, nil
}

// Marshal encodes s as indented JSON with a final newline.
func (s *Status) Marshal() []byte {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(err) // strings, numbers and times
	}
	return append(b, '\n')
}

// ReadStatus reads the state file in stateDir; none is an empty Status.
func ReadStatus(stateDir string) (*Status, error) {
	s, err := readStateFile(stateDir, StateFile, ParseStatus)
	if s == nil && err == nil {
		return &Status{}, nil
	}
	return s, err
}

// writeStatus replaces the state file durably.
func writeStatus(stateDir string, s *Status) error {
	return writeStateFile(stateDir, StateFile, s.Marshal())
}

// readStateFile reads and parses file name of stateDir: nil, nil when
// there is none; a parse error names the file.
func readStateFile[T any](stateDir, name string, parse func([]byte) (*T, error)) (*T, error) {
	path := filepath.Join(stateDir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// writeStateFile replaces file name of stateDir with data durably (a
// temporary file renamed over it).
func writeStateFile(stateDir, name string, data []byte) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(stateDir, name), func(w *bufio.Writer) error {
		_, err := w.Write(data)
		return err
	}, false)
}

// decodeStrict decodes one JSON value of at most max bytes into v,
// refusing unknown fields and anything after it; errors begin with what.
func decodeStrict(data []byte, max int, what string, v any) error {
	if len(data) > max {
		return fmt.Errorf("%s: %d bytes, more than %d", what, len(data), max)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := dec.Token(); err == nil {
		return fmt.Errorf("%s: more than one JSON value", what)
	}
	return nil
}

// failure makes a Failure with the reason cut to MaxReasonBytes.
func failure(version, reason string, at time.Time) *Failure {
	// Valid UTF-8, whole characters: ParseStatus refuses anything else.
	reason = textcut.Cut(strings.ToValidUTF8(reason, "?"), MaxReasonBytes)
	return &Failure{Version: version, Reason: reason, At: at.UTC().Round(time.Millisecond)}
}
