package link

// Type is the value of a frame's "type" field.
type Type string

// Frame types of the channel spec and the DESIGN.md extensions.
const (
	TypeConnect   Type = "connect"    // device -> server
	TypeConnected Type = "connected"  // server -> device
	TypeMessage   Type = "message"    // both ways: user text up, assistant reply down
	TypeAck       Type = "ack"        // server -> device
	TypePing      Type = "ping"       // both ways
	TypePong      Type = "pong"       // both ways
	TypeError     Type = "error"      // server -> device
	TypeProgress  Type = "progress"   // extension, server -> device
	TypeCancel    Type = "cancel"     // extension, device -> server
	TypeNotice    Type = "notice"     // extension, server -> device
	TypeNoticeAck Type = "notice_ack" // extension, device -> server
	TypeScreen    Type = "screen"     // extension, device -> server
	TypeDelta     Type = "delta"      // extension, server -> device
)

// Capabilities a device may list in Connect.Capabilities.
const (
	CapText     = "text"
	CapProgress = "progress"
	CapCancel   = "cancel"
	CapNotice   = "notice" // the device shows server-pushed notices and acks them
	CapScreen   = "screen" // the device sends Screen frames (mirror of its display)
	CapStream   = "stream" // the device takes Delta frames (a reply's text as it is written)
)

// Notice priorities.
const (
	PriorityInfo  = "info"
	PriorityAlert = "alert"
)

// Finish reasons of an assistant Message.
const (
	FinishStop      = "stop"
	FinishError     = "error"
	FinishTimeout   = "timeout"
	FinishCancelled = "cancelled"
)

// RoleAssistant marks a Message that carries an agent's reply.
const RoleAssistant = "assistant"

// Frame is one decoded wire frame: *Connect, *Connected, *Message, *Ack,
// *Ping, *Pong, *Error, *Progress, *Cancel, *Notice, *NoticeAck, *Screen,
// *Delta, or a fleet operation's (fleet.go: *Update, *UpdateStatus,
// *Settings, *SettingsAck, *Diag, *DiagResult).
type Frame interface {
	FrameType() Type
}

// Connect opens a session. PeerID is required and stable per device.
type Connect struct {
	PeerID       string   `json:"peer_id"`
	DeviceName   string   `json:"device_name,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	ThreadID     string   `json:"thread_id,omitempty"`
	UserID       string   `json:"user_id,omitempty"`
	// Token authenticates the device when the channel has tokens and the
	// client could not send an Authorization header.
	Token string `json:"token,omitempty"`
	// Board, Version and Tags (extension) describe the device for the
	// server's device registry: its board profile name, the termd
	// version, and operator tags such as {"site":"lobby"}.
	Board   string            `json:"board,omitempty"`
	Version string            `json:"version,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	// Platform (extension) is the os/arch[/variant] termd was built for
	// (linux/arm/6, linux/arm64): what a device that lists "update" can
	// install. SettingsVersion is the version of the pushed settings the
	// device applied (0: none).
	Platform        string `json:"platform,omitempty"`
	SettingsVersion int64  `json:"settings_version,omitempty"`
	// BinarySHA256 (extension, issue 43) is the lowercase hex SHA-256 of
	// the binary the device runs: a rollout sends a patch made from it
	// when one is stored. The server keeps it only when it is 64 hex digits.
	BinarySHA256 string `json:"binary_sha256,omitempty"`
}

// Connected answers Connect.
type Connected struct {
	ChannelID string `json:"channel_id"`
	SessionID string `json:"session_id"`
	// HeartbeatSeconds (extension) tells the device how often to ping.
	HeartbeatSeconds int `json:"heartbeat_seconds,omitempty"`
}

// Message is user text (device -> server: MessageID, Text) or an
// assistant reply (server -> device: Role "assistant", MessageID, RunID,
// Text, FinishReason).
type Message struct {
	Role         string `json:"role,omitempty"`
	MessageID    string `json:"message_id"`
	RunID        string `json:"run_id,omitempty"`
	Text         string `json:"text"`
	FinishReason string `json:"finish_reason,omitempty"`
	ThreadID     string `json:"thread_id,omitempty"`
	UserID       string `json:"user_id,omitempty"`
}

// IsReply reports whether m is an assistant reply rather than user text.
func (m *Message) IsReply() bool { return m.Role == RoleAssistant }

// Ack acknowledges an accepted user Message. For a message id seen before,
// Duplicate is set and either Reply (the cached final reply, run done) or
// Pending (still running) is set.
type Ack struct {
	MessageID string   `json:"message_id"`
	SessionID string   `json:"session_id"`
	Accepted  bool     `json:"accepted"`
	Duplicate bool     `json:"duplicate,omitempty"`
	Pending   bool     `json:"pending,omitempty"`
	Reply     *Message `json:"reply,omitempty"`
}

// Ping asks the other end for a Pong.
type Ping struct{}

// Pong answers Ping.
type Pong struct{}

// Error reports a refused frame; the connection stays open unless the
// server closes it right after. MessageID and Code are optional.
type Error struct {
	Error     string `json:"error"`
	MessageID string `json:"message_id,omitempty"`
	Code      string `json:"code,omitempty"`
}

// Progress (extension) tells a device that listed "progress" how a run is
// going: turn accepted, a tool in use, agent progress text.
type Progress struct {
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
}

// Delta (extension) is reply text as the agent writes it, for a device
// that listed "stream": Text is appended to what the device has for
// MessageID. Seq counts a message's deltas on one connection from 1, with
// no gaps (a new connection starts again at 1, its first delta carrying
// all the text so far). Deltas are not acked, not stored and may stop
// early; the final Message is authoritative and carries the whole text.
type Delta struct {
	MessageID string `json:"message_id"`
	Seq       int64  `json:"seq"`
	Text      string `json:"text"`
}

// Cancel (extension) asks the server to interrupt the run of MessageID.
// ThreadID, when set, names the thread the message was sent to; without
// it the server finds the message's session itself.
type Cancel struct {
	MessageID string `json:"message_id"`
	ThreadID  string `json:"thread_id,omitempty"`
}

// Notice (extension) is a server push to a device that listed "notice":
// text the device shows on its own, not as a reply. ExpiresAt is RFC 3339
// (UTC); a device does not show a notice past it. DisplaySeconds is how
// long it takes over the screen (0: the device's default).
type Notice struct {
	NoticeID       string `json:"notice_id"`
	Text           string `json:"text"`
	Priority       string `json:"priority"`
	DisplaySeconds int    `json:"display_seconds,omitempty"`
	ExpiresAt      string `json:"expires_at,omitempty"`
}

// NoticeAck (extension) tells the server a notice has been drawn; the
// server stops resending it.
type NoticeAck struct {
	NoticeID string `json:"notice_id"`
}

// Screen (extension) is what a device that listed "screen" shows now: one
// string per display row, the cursor (0-based) and the backlight. Sent on
// change, coalesced, a few per second at most. ROM is the character ROM
// ("A00", "A02") of the HD44780 glass the rows are on; empty when the rows
// are plain text (a console) or the font is not known.
type Screen struct {
	Rows      []string `json:"rows"`
	ROM       string   `json:"rom,omitempty"`
	CursorRow int      `json:"cursor_row"`
	CursorCol int      `json:"cursor_col"`
	CursorOn  bool     `json:"cursor_on"`
	Backlight bool     `json:"backlight"`
}

func (*Connect) FrameType() Type   { return TypeConnect }
func (*Connected) FrameType() Type { return TypeConnected }
func (*Message) FrameType() Type   { return TypeMessage }
func (*Ack) FrameType() Type       { return TypeAck }
func (*Ping) FrameType() Type      { return TypePing }
func (*Pong) FrameType() Type      { return TypePong }
func (*Error) FrameType() Type     { return TypeError }
func (*Progress) FrameType() Type  { return TypeProgress }
func (*Cancel) FrameType() Type    { return TypeCancel }
func (*Notice) FrameType() Type    { return TypeNotice }
func (*NoticeAck) FrameType() Type { return TypeNoticeAck }
func (*Screen) FrameType() Type    { return TypeScreen }
func (*Delta) FrameType() Type     { return TypeDelta }

// Error codes the server puts in Error.Code.
const (
	CodeBadFrame     = "bad_frame"     // invalid JSON, missing/unknown type, bad field
	CodeNotConnected = "not_connected" // frame other than connect/ping before connect
	CodeBadMessage   = "bad_message"   // missing message_id, blank or oversized text
	CodeUnauthorized = "unauthorized"  // token missing or wrong
	CodeReplaced     = "replaced"      // a newer connection took this peer
	CodeUnknownRun   = "unknown_run"   // cancel for a message that is not running
	// CodeRegistryFull: connect refused, the channel's device registry
	// holds its maximum of anonymous devices (or bytes); the connection is
	// closed (1013, try again later). A known or authenticated device is
	// not refused.
	CodeRegistryFull = "registry_full"
	// CodeBusy is retryable: the message was not accepted (no ack) because
	// a bound was reached (session queue, peer rate, server-wide waiting
	// runs); the device keeps it and resends after a backoff.
	CodeBusy = "busy"
)
