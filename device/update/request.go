package update

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"termlink/release"
)

// RequestFile, in the state dir, names the update the worker staged last:
// its version and the update_id its server gave it. Only the worker writes
// it (Apply, before it tells the supervisor "update"); the supervisor
// never reads it, so its contract is unchanged. The next start reads it
// (ReadRequest) to name, in its report, the attempt that report is about:
// a server then matches the attempt instead of guessing it from the order
// reports came in, which two connections of one device can swap.
const RequestFile = "update-request.json"

// MaxRequestBytes bounds the request file, and MaxUpdateIDBytes its
// update_id (the link's bound on fleet ids).
const (
	MaxRequestBytes  = 1 << 10
	MaxUpdateIDBytes = 128
)

// Request is the update the worker staged last.
type Request struct {
	Version  string `json:"version"`
	UpdateID string `json:"update_id,omitempty"` // empty: the server sent none
}

// IDFor is the request's update_id when it is about version, else "".
func (r *Request) IDFor(version string) string {
	if r == nil || r.Version != version {
		return ""
	}
	return r.UpdateID
}

// Marshal encodes the request file.
func (r *Request) Marshal() []byte {
	b, _ := json.Marshal(r)
	return append(b, '\n')
}

// ParseRequest decodes and checks a request file. Unknown fields, a
// second JSON value and values out of range are refused with the field
// named.
func ParseRequest(data []byte) (*Request, error) {
	var r Request
	if err := decodeStrict(data, MaxRequestBytes, "update request", &r); err != nil {
		return nil, err
	}
	if err := release.CheckVersion(r.Version); err != nil {
		return nil, fmt.Errorf("update request: version: %w", err)
	}
	if len(r.UpdateID) > MaxUpdateIDBytes || !utf8.ValidString(r.UpdateID) {
		return nil, fmt.Errorf("update request: update_id: want at most %d bytes of UTF-8", MaxUpdateIDBytes)
	}
	return &r, nil
}

// ReadRequest reads the request file of stateDir: nil when there is none.
func ReadRequest(stateDir string) (*Request, error) {
	return readStateFile(stateDir, RequestFile, ParseRequest)
}

// writeRequest records r durably (a temporary file renamed over it).
func writeRequest(stateDir string, r *Request) error {
	if _, err := ParseRequest(r.Marshal()); err != nil {
		return err
	}
	return writeStateFile(stateDir, RequestFile, r.Marshal())
}
