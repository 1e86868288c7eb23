package link

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Fleet operations (issue 28, extension): frames an operator's server
// sends a device that listed the matching capability, and the device's
// answers. They are rare (a few per device per day), so they are encoded
// with encoding/json rather than by hand.
//
//	update        server -> device   a signed release to install (capability "update")
//	update_status device -> server   how an update went, and on each connect where the device is
//	settings      server -> device   the device's settings, versioned (capability "settings")
//	settings_ack  device -> server   settings applied (or why not)
//	diag          server -> device   a request for the log's end or a self-test (capability "diag")
//	diag_result   device -> server   its answer
const (
	TypeUpdate       Type = "update"
	TypeUpdateStatus Type = "update_status"
	TypeSettings     Type = "settings"
	TypeSettingsAck  Type = "settings_ack"
	TypeDiag         Type = "diag"
	TypeDiagResult   Type = "diag_result"
)

// Capabilities of fleet operations.
const (
	// CapUpdate: the device installs signed releases (it runs under its
	// update supervisor with a release key pinned). Its connect says its
	// Platform and Version.
	CapUpdate = "update"
	// CapSettings: the device applies and keeps pushed settings.
	CapSettings = "settings"
	// CapDiag: the device answers diag frames (its log, its self-test).
	CapDiag = "diag"
)

// Update states a device reports in UpdateStatus.State.
const (
	UpdateDownloading = "downloading" // fetching and checking the binary
	UpdateRestarting  = "restarting"  // staged; restarting into it on trial
	UpdateInstalled   = "installed"   // the release passed its health gate: the device runs it
	UpdateRolledBack  = "rolled_back" // the release failed its gate; the device runs the previous binary
	UpdateRefused     = "refused"     // not downloaded: wrong platform, bad signature, downgrade, no key, no supervisor
	UpdateFailed      = "failed"      // the download or its checks failed (truncated, checksum, disk full)
)

// IsUpdateFailure reports whether an update state is a failure: the
// device runs its previous version and says why in Reason.
func IsUpdateFailure(state string) bool {
	return state == UpdateRolledBack || state == UpdateRefused || state == UpdateFailed
}

// Diag kinds.
const (
	DiagLogs     = "logs"     // the last Bytes of the device's log
	DiagSelftest = "selftest" // the board's self-checks that need no person
)

// MaxUpdateReasonBytes bounds UpdateStatus.Reason, SettingsAck.Error and
// DiagResult.Error, and MaxVersionBytes UpdateStatus.Version and Running (a release
// version's most): what a server keeps of them per device is bounded.
const (
	MaxUpdateReasonBytes = 1024
	MaxVersionBytes      = 64
)

// MaxFleetIDBytes bounds the ids of fleet frames (Update's and
// UpdateStatus' update_id, Diag's and DiagResult's request_id), and
// MaxDiagKindBytes DiagResult.Kind: the server names them in what it
// writes, and makes its own far shorter (a peer_id's bound).
const (
	MaxFleetIDBytes  = 128
	MaxDiagKindBytes = 32
)

// MaxDiagBytes bounds DiagResult.Text (and Diag.Bytes): 64 KiB.
const MaxDiagBytes = 64 << 10

// DiagReadLimit is the server's read limit for a connection that listed
// "diag": a diag_result of MaxDiagBytes, escaped.
var DiagReadLimit = ReadLimit(MaxDiagBytes)

// Update (extension) asks a device that listed "update" to install a
// release. Manifest is the release manifest's JSON text (package
// release: version, platform, size, sha256, signature), which the device
// verifies against its pinned key before it downloads anything. URL is
// where the binary is, absolute or a path on the channel's server (the
// device fetches it over HTTP(S) with its own credentials).
type Update struct {
	UpdateID       string `json:"update_id"`
	Version        string `json:"version"`
	Manifest       string `json:"manifest"`
	URL            string `json:"url"`
	AllowDowngrade bool   `json:"allow_downgrade,omitempty"`
	GateSeconds    int    `json:"gate_seconds,omitempty"` // the health gate (0: the device's own)
	// PatchURL and PatchManifest (issue 43), both or neither: a patch
	// (package release/delta) that makes the release of the binary the
	// device said it runs (connect's binary_sha256), and its signed
	// manifest's JSON text (release.PatchManifest). The device verifies
	// the manifest, applies the patch and checks the result; on any
	// failure it fetches URL, the whole binary, by itself.
	PatchURL      string `json:"patch_url,omitempty"`
	PatchManifest string `json:"patch_manifest,omitempty"`
}

// UpdateStatus (extension) is how an update of a device that listed
// "update" goes: Version is the release it is about, Running the version
// the device runs now, State one of the Update* states, Reason the why of
// a failure. The device sends one on each connect (its last update's
// outcome, or State "installed" with Version == Running), and one at
// each step of an update. UpdateID echoes the Update frame's when known.
type UpdateStatus struct {
	UpdateID string `json:"update_id,omitempty"`
	Version  string `json:"version"`
	Running  string `json:"running"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
}

// Settings (extension) are a device's settings as the operator set them,
// for a device that listed "settings". Version grows with each change;
// a device applies a version once, keeps it, and acks it. A field left
// out (nil, "") leaves the device's own value.
type Settings struct {
	Version int64 `json:"version"`
	// IdleText is what the idle screen shows; IdleSeconds how long before
	// it does (0: never).
	IdleText    *string `json:"idle_text,omitempty"`
	IdleSeconds *int    `json:"idle_seconds,omitempty"`
	// BacklightOffAfter is the seconds idle before the backlight goes
	// off (0: never).
	BacklightOffAfter *int `json:"backlight_off_after,omitempty"`
	// NoticeSeconds is how long a notice without display_seconds takes
	// over the screen.
	NoticeSeconds *int `json:"notice_seconds,omitempty"`
	// LogLevel: debug, info, warn or error.
	LogLevel string `json:"log_level,omitempty"`
	// BusySeconds is how long a key keeps the device busy (issue 42:
	// busy.go; 0: the device's own, 60 s).
	BusySeconds *int `json:"busy_seconds,omitempty"`
	// Tags replace the device's tags (nil: kept; empty: cleared). Not
	// omitempty: an empty map must reach the device as {} (omitempty
	// turned "clear the tags" into "keep them"; FuzzDecode found it).
	Tags map[string]string `json:"tags"`
}

// SettingsAck (extension) says a device applied settings Version (Error
// empty), or why not (it keeps the ones it had).
type SettingsAck struct {
	Version int64  `json:"version"`
	Error   string `json:"error,omitempty"`
}

// Diag (extension) asks a device that listed "diag" for its log's last
// Bytes (Kind "logs") or to run its self-checks (Kind "selftest").
type Diag struct {
	RequestID string `json:"request_id"`
	Kind      string `json:"kind"`
	Bytes     int    `json:"bytes,omitempty"`
}

// DiagResult (extension) answers Diag RequestID: Text is the log's end or
// the self-test's report (at most MaxDiagBytes); Error says why there is
// none. OK is the self-test's verdict (every check passed).
type DiagResult struct {
	RequestID string `json:"request_id"`
	Kind      string `json:"kind"`
	Text      string `json:"text,omitempty"`
	OK        bool   `json:"ok,omitempty"`
	Error     string `json:"error,omitempty"`
}

func (*Update) FrameType() Type       { return TypeUpdate }
func (*UpdateStatus) FrameType() Type { return TypeUpdateStatus }
func (*Settings) FrameType() Type     { return TypeSettings }
func (*SettingsAck) FrameType() Type  { return TypeSettingsAck }
func (*Diag) FrameType() Type         { return TypeDiag }
func (*DiagResult) FrameType() Type   { return TypeDiagResult }

// fleetFrame makes the empty frame of a fleet operation's type, or nil.
func fleetFrame(t Type) Frame {
	switch t {
	case TypeUpdate:
		return new(Update)
	case TypeUpdateStatus:
		return new(UpdateStatus)
	case TypeSettings:
		return new(Settings)
	case TypeSettingsAck:
		return new(SettingsAck)
	case TypeDiag:
		return new(Diag)
	case TypeDiagResult:
		return new(DiagResult)
	case TypeQuestion:
		return new(Question)
	case TypeAnswer:
		return new(Answer)
	case TypeBusy:
		return new(Busy)
	case TypeHealth:
		return new(Health)
	}
	return nil
}

// fleetProblem checks a decoded fleet frame: the field at fault and what
// is wrong with it, or "", "".
func fleetProblem(f Frame) (field, msg string) {
	const missing = "is missing or empty"
	switch f := f.(type) {
	case *Question, *Answer:
		return choiceProblem(f)
	case *Busy:
		return busyProblem(f)
	case *Health:
		return healthProblem(f)
	case *Update:
		switch {
		case f.UpdateID == "":
			return "update_id", missing
		case len(f.UpdateID) > MaxFleetIDBytes:
			return "update_id", tooLong(len(f.UpdateID), MaxFleetIDBytes)
		case f.Version == "":
			return "version", missing
		case f.Manifest == "":
			return "manifest", missing
		case f.URL == "":
			return "url", missing
		case f.GateSeconds < 0:
			return "gate_seconds", "must not be negative, got " + strconv.Itoa(f.GateSeconds)
		case f.PatchURL != "" && f.PatchManifest == "":
			return "patch_manifest", "is missing: a patch_url comes with its manifest"
		case f.PatchManifest != "" && f.PatchURL == "":
			return "patch_url", "is missing: a patch_manifest comes with its url"
		}
	case *UpdateStatus:
		switch f.State {
		case UpdateDownloading, UpdateRestarting, UpdateInstalled, UpdateRolledBack, UpdateRefused, UpdateFailed:
		case "":
			return "state", missing
		default:
			return "state", fmt.Sprintf("must be one of downloading, restarting, installed, rolled_back, refused, failed; got %q", f.State)
		}
		switch {
		case len(f.UpdateID) > MaxFleetIDBytes:
			return "update_id", tooLong(len(f.UpdateID), MaxFleetIDBytes)
		case f.Version == "":
			return "version", missing
		case len(f.Version) > MaxVersionBytes:
			return "version", tooLong(len(f.Version), MaxVersionBytes)
		case len(f.Running) > MaxVersionBytes:
			return "running", tooLong(len(f.Running), MaxVersionBytes)
		case len(f.Reason) > MaxUpdateReasonBytes:
			return "reason", tooLong(len(f.Reason), MaxUpdateReasonBytes)
		}
	case *Settings:
		if f.Version < 1 {
			return "version", "must be a whole number from 1, got " + strconv.FormatInt(f.Version, 10)
		}
		for name, p := range map[string]*int{"idle_seconds": f.IdleSeconds, "backlight_off_after": f.BacklightOffAfter, "notice_seconds": f.NoticeSeconds, "busy_seconds": f.BusySeconds} {
			if p != nil && *p < 0 {
				return name, "must not be negative, got " + strconv.Itoa(*p)
			}
		}
		switch f.LogLevel {
		case "", "debug", "info", "warn", "error":
		default:
			return "log_level", fmt.Sprintf("must be debug, info, warn or error; got %q", f.LogLevel)
		}
	case *SettingsAck:
		if f.Version < 1 {
			return "version", "must be a whole number from 1, got " + strconv.FormatInt(f.Version, 10)
		}
		if len(f.Error) > MaxUpdateReasonBytes {
			return "error", tooLong(len(f.Error), MaxUpdateReasonBytes)
		}
	case *Diag:
		switch {
		case f.RequestID == "":
			return "request_id", missing
		case len(f.RequestID) > MaxFleetIDBytes:
			return "request_id", tooLong(len(f.RequestID), MaxFleetIDBytes)
		case f.Kind != DiagLogs && f.Kind != DiagSelftest:
			return "kind", fmt.Sprintf("must be %q or %q; got %q", DiagLogs, DiagSelftest, f.Kind)
		case f.Bytes < 0 || f.Bytes > MaxDiagBytes:
			return "bytes", fmt.Sprintf("must be from 0 to %d, got %d", MaxDiagBytes, f.Bytes)
		}
	case *DiagResult:
		switch {
		case f.RequestID == "":
			return "request_id", missing
		case len(f.RequestID) > MaxFleetIDBytes:
			return "request_id", tooLong(len(f.RequestID), MaxFleetIDBytes)
		case f.Kind == "":
			return "kind", missing
		case len(f.Kind) > MaxDiagKindBytes:
			return "kind", tooLong(len(f.Kind), MaxDiagKindBytes)
		case len(f.Text) > MaxDiagBytes:
			return "text", tooLong(len(f.Text), MaxDiagBytes)
		case len(f.Error) > MaxUpdateReasonBytes:
			return "error", tooLong(len(f.Error), MaxUpdateReasonBytes)
		}
	}
	return "", ""
}

// tooLong says a field of n bytes is over its bound.
func tooLong(n, bound int) string { return fmt.Sprintf("is %d bytes, more than %d", n, bound) }

// appendFleet appends a fleet frame's fields (after "type") as
// encoding/json writes them; ok is false for any other frame.
func appendFleet(dst []byte, f Frame) (out []byte, ok bool, err error) {
	switch f.(type) {
	case *Update, *UpdateStatus, *Settings, *SettingsAck, *Diag, *DiagResult, *Question, *Answer, *Busy, *Health:
	default:
		return dst, false, nil
	}
	body, err := json.Marshal(f)
	if err != nil {
		return dst, true, fmt.Errorf("link: encode %s frame: %w", f.FrameType(), err)
	}
	if len(body) > 2 {
		dst = append(append(dst, ','), body[1:len(body)-1]...)
	}
	return dst, true, nil
}
