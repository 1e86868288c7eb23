package link

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxFrameBytes is the largest frame Decode is meant for; readers should set
// their WebSocket read limit from the channel's maxMessageChars instead (see
// ReadLimit).
const MaxFrameBytes = 1 << 20

// ReadLimit is the WebSocket read limit for a channel whose messages carry
// at most maxChars characters: every character may take up to 6 bytes once
// JSON-escaped (\u00e9), plus room for the other fields.
func ReadLimit(maxChars int) int64 { return int64(maxChars)*6 + 4096 }

// ErrUnknownType is matched (errors.Is) by the error Decode returns for a
// frame whose type is not one this package knows.
var ErrUnknownType = errors.New("unsupported frame type")

// DecodeError says exactly what is wrong with a frame.
type DecodeError struct {
	Type  Type   // the frame's type when it was readable
	Field string // the offending field ("" when the frame as a whole is bad)
	Msg   string // what is wrong
	err   error
}

func (e *DecodeError) Error() string {
	switch {
	case e.Field != "" && e.Type != "":
		return fmt.Sprintf("%s frame: field %q %s", e.Type, e.Field, e.Msg)
	case e.Field != "":
		return fmt.Sprintf("field %q %s", e.Field, e.Msg)
	default:
		return e.Msg
	}
}

func (e *DecodeError) Unwrap() error { return e.err }

// Decode parses one wire frame. Unknown fields are ignored (forward
// compatible); everything else that is wrong is a *DecodeError.
func Decode(data []byte) (Frame, error) {
	var head struct {
		Type json.RawMessage `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, jsonError("", err)
	}
	if head.Type == nil {
		return nil, &DecodeError{Msg: `missing "type" field`}
	}
	var t string
	if err := json.Unmarshal(head.Type, &t); err != nil || jsonKind(head.Type) == "null" {
		return nil, &DecodeError{Field: "type", Msg: "must be a string, got " + jsonKind(head.Type)}
	}
	typ := Type(t)
	var f Frame
	switch typ {
	case TypeConnect:
		f = new(Connect)
	case TypeConnected:
		f = new(Connected)
	case TypeMessage:
		f = new(Message)
	case TypeAck:
		f = new(Ack)
	case TypePing:
		return &Ping{}, nil
	case TypePong:
		return &Pong{}, nil
	case TypeError:
		f = new(Error)
	case TypeProgress:
		f = new(Progress)
	case TypeCancel:
		f = new(Cancel)
	case "":
		return nil, &DecodeError{Field: "type", Msg: "is empty"}
	default:
		return nil, &DecodeError{Type: typ, Msg: "Unsupported websocket frame type: " + t, err: ErrUnknownType}
	}
	if err := json.Unmarshal(data, f); err != nil {
		return nil, jsonError(typ, err)
	}
	if field := missingField(f); field != "" {
		return nil, &DecodeError{Type: typ, Field: field, Msg: "is missing or empty"}
	}
	return f, nil
}

// missingField names the first required field f lacks. Only fields without
// which the frame means nothing are required here; the server checks the
// rest (blank text, size) and answers with its own error.
func missingField(f Frame) string {
	switch f := f.(type) {
	case *Connected:
		if f.ChannelID == "" {
			return "channel_id"
		}
		if f.SessionID == "" {
			return "session_id"
		}
	case *Message:
		if f.MessageID == "" {
			return "message_id"
		}
	case *Ack:
		if f.MessageID == "" {
			return "message_id"
		}
	case *Error:
		if f.Error == "" {
			return "error"
		}
	case *Progress:
		if f.MessageID == "" {
			return "message_id"
		}
	case *Cancel:
		if f.MessageID == "" {
			return "message_id"
		}
	}
	return ""
}

func jsonError(typ Type, err error) error {
	var syn *json.SyntaxError
	var ute *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &DecodeError{Type: typ, Msg: fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, err), err: err}
	case errors.As(err, &ute) && ute.Field == "":
		return &DecodeError{Type: typ, Msg: "frame must be a JSON object, got " + ute.Value, err: err}
	case errors.As(err, &ute):
		return &DecodeError{Type: typ, Field: ute.Field, Msg: fmt.Sprintf("must be %s, got %s", goKind(ute.Type.Kind().String()), ute.Value), err: err}
	default:
		return &DecodeError{Type: typ, Msg: "invalid JSON: " + err.Error(), err: err}
	}
}

func goKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "ptr", "struct", "map":
		return "an object"
	default:
		return "a number"
	}
}

func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// Encode returns the wire JSON of f with "type" as the first field.
func Encode(f Frame) ([]byte, error) { return AppendEncode(nil, f) }

// AppendEncode appends the wire JSON of f to dst.
func AppendEncode(dst []byte, f Frame) ([]byte, error) {
	if f == nil {
		return dst, errors.New("link: encode nil frame")
	}
	dst = append(dst, `{"type":"`...)
	dst = append(dst, f.FrameType()...)
	dst = append(dst, '"')
	switch f.(type) {
	case *Ping, *Pong:
		return append(dst, '}'), nil
	}
	body, err := json.Marshal(f)
	if err != nil {
		return dst, fmt.Errorf("link: encode %s frame: %w", f.FrameType(), err)
	}
	if len(body) > 2 { // body is {...}; splice its fields after "type"
		dst = append(dst, ',')
		dst = append(dst, body[1:]...)
	} else {
		dst = append(dst, '}')
	}
	return dst, nil
}

// MustEncode is Encode for frames built in code, which cannot fail to
// marshal; it panics on a nil frame.
func MustEncode(f Frame) []byte {
	b, err := Encode(f)
	if err != nil {
		panic(err)
	}
	return b
}
