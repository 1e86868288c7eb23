package wschannel

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"net/http"
	"time"
)

// upgrade answers r's WebSocket handshake as gorilla's Upgrader does for
// the adapters (newUpgrader: any origin, no subprotocol, no compression),
// with the same checks in the same order and the same answers, and
// hands the connection a box (box.go) from boxes instead of a new Conn:
// a connect makes no Conn, no lock channel, no handler closures and no
// read buffer of its own, garbage that a connect burst would otherwise
// leave interleaved with the connections' long-lived memory. The box
// reads from and writes to the hijacked connection's flushConn, whose
// read buffer takes the place of net/http's 4 KiB one.
func (a *terminalAdapter) upgrade(w http.ResponseWriter, r *http.Request) (*wsConn, error) {
	const badHandshake = "websocket: the client is not using the websocket protocol: "
	switch {
	case !tokenListContainsValue(r.Header, "Connection", "upgrade"):
		return nil, upgradeError(w, http.StatusBadRequest, badHandshake+"'upgrade' token not found in 'Connection' header")
	case !tokenListContainsValue(r.Header, "Upgrade", "websocket"):
		return nil, upgradeError(w, http.StatusBadRequest, badHandshake+"'websocket' token not found in 'Upgrade' header")
	case r.Method != http.MethodGet:
		return nil, upgradeError(w, http.StatusMethodNotAllowed, badHandshake+"request method is not GET")
	case !tokenListContainsValue(r.Header, "Sec-Websocket-Version", "13"):
		return nil, upgradeError(w, http.StatusBadRequest, "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header")
	}
	key := r.Header.Get("Sec-Websocket-Key")
	if !isValidChallengeKey(key) {
		return nil, upgradeError(w, http.StatusBadRequest, "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length")
	}
	h, ok := w.(http.Hijacker)
	if !ok {
		return nil, upgradeError(w, http.StatusInternalServerError, "the HTTP connection cannot be taken over for a WebSocket")
	}
	nc, brw, err := h.Hijack()
	if err != nil {
		return nil, upgradeError(w, http.StatusInternalServerError, err.Error())
	}
	if brw.Reader.Buffered() > 0 {
		nc.Close()
		return nil, errors.New("websocket: client sent data before handshake is complete")
	}
	// The HTTP server's read and write timeouts are for plain requests;
	// after the upgrade the connection's reader and writer own its
	// deadlines.
	_ = nc.SetDeadline(time.Time{})
	c := &wsConn{a: a}
	c.nc.Conn, c.nc.stall = nc, a.writeStall
	var buf [160]byte
	p := append(buf[:0], "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	p = appendAcceptKey(p, key)
	p = append(p, "\r\n\r\n"...)
	if _, err := c.nc.Write(p); err != nil {
		c.nc.Close()
		return nil, err
	}
	b := getBox()
	b.nc, b.owner = &c.nc, c
	b.br.Reset(b)
	c.box = b
	return c, nil
}

// upgradeError answers a refused handshake as the adapters' upgrader
// did (its Error).
func upgradeError(w http.ResponseWriter, status int, reason string) error {
	http.Error(w, "websocket upgrade failed: "+reason, status)
	return errors.New(reason)
}

// keyGUID is RFC 6455's (section 1.3).
const keyGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// appendAcceptKey appends the Sec-WebSocket-Accept of key.
func appendAcceptKey(p []byte, key string) []byte {
	var kb [64]byte
	sum := sha1.Sum(append(append(kb[:0], key...), keyGUID...))
	return base64.StdEncoding.AppendEncode(p, sum[:])
}

// isValidChallengeKey is gorilla's: the key is the Base64 of 16 bytes.
func isValidChallengeKey(s string) bool {
	if s == "" {
		return false
	}
	decoded, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(decoded) == 16
}

// tokenListContainsValue is gorilla's: whether a comma-separated list of
// RFC 2616 tokens in header name holds value (ASCII case folded).
func tokenListContainsValue(header http.Header, name string, value string) bool {
headers:
	for _, s := range header[name] {
		for {
			var t string
			t, s = nextToken(skipSpace(s))
			if t == "" {
				continue headers
			}
			s = skipSpace(s)
			if s != "" && s[0] != ',' {
				continue headers
			}
			if equalASCIIFold(t, value) {
				return true
			}
			if s == "" {
				continue headers
			}
			s = s[1:]
		}
	}
	return false
}

func skipSpace(s string) string {
	i := 0
	for ; i < len(s); i++ {
		if b := s[i]; b != ' ' && b != '\t' {
			break
		}
	}
	return s[i:]
}

func nextToken(s string) (token, rest string) {
	i := 0
	for ; i < len(s); i++ {
		if !isTokenOctet(s[i]) {
			break
		}
	}
	return s[:i], s[i:]
}

// isTokenOctet: RFC 2616's token characters (any CHAR but CTLs and
// separators).
func isTokenOctet(b byte) bool {
	if b <= ' ' || b >= 0x7f {
		return false
	}
	switch b {
	case '(', ')', '<', '>', '@', ',', ';', ':', '\\', '"', '/', '[', ']', '?', '=', '{', '}':
		return false
	}
	return true
}

func equalASCIIFold(s, t string) bool {
	for s != "" && t != "" {
		sr, tr := s[0], t[0]
		s, t = s[1:], t[1:]
		if sr == tr {
			continue
		}
		if 'A' <= sr && sr <= 'Z' {
			sr += 'a' - 'A'
		}
		if 'A' <= tr && tr <= 'Z' {
			tr += 'a' - 'A'
		}
		if sr != tr {
			return false
		}
	}
	return s == t
}
