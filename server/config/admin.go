package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
)

// Role is what an admin token may do with the operator API.
type Role int

// Roles, weakest first: a stronger role may do what a weaker one may.
const (
	RoleNone     Role = iota // no valid token
	RoleViewer               // GET: fleet, events, peers, notices
	RoleOperator             // also POST and DELETE: notices, cancel
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	}
	return "none"
}

// MinPlainTokenChars is the shortest plain (not sha256:) admin token the
// config accepts: a short token guarding a fleet is guessed.
const MinPlainTokenChars = 16

// hashPrefix marks a token given as the hex SHA-256 of the secret.
const hashPrefix = "sha256:"

// Admin is the "admin" block: the operator API's tokens.
type Admin struct {
	Tokens []AdminToken
	// MetricsRequireToken puts /metrics behind the tokens too (viewer or
	// operator); by default /metrics is open.
	MetricsRequireToken bool
	// AllowedHosts are the names (besides its listen address and
	// localhost) the operator API answers for in the Host header, and
	// accepts in Origin: what a reverse proxy or the operator's browser
	// calls the server. Each is a lower-case host (any port) or host:port.
	AllowedHosts []HostPort
}

// HostPort is one allowed host: Port "" matches any port.
type HostPort struct {
	Host string // lower case; an IPv6 address without brackets
	Port string
}

func (h HostPort) String() string {
	if h.Port == "" {
		return h.Host
	}
	return net.JoinHostPort(h.Host, h.Port)
}

// Allows reports whether host and port (as a request gives them: a
// lower-case name or address without brackets, and a port) match h.
func (h HostPort) Allows(host, port string) bool {
	return h.Host == host && (h.Port == "" || h.Port == port)
}

// ParseHostPort parses an allowedHosts entry: a DNS name or an IP
// address, with an optional port ("ops.example.com",
// "ops.example.com:8443", "[2001:db8::1]:8080"); no scheme, path or
// wildcard.
func ParseHostPort(s string) (HostPort, error) {
	const like = `like "ops.example.com" or "ops.example.com:8443"`
	if s == "" {
		return HostPort{}, fmt.Errorf("must not be empty: give a host name %s", like)
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@*") {
		return HostPort{}, fmt.Errorf("%s is not a host: give the name only (no scheme, path or wildcard), %s", quote(s), like)
	}
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strings.Trim(p, "0123456789") != "" {
			return HostPort{}, fmt.Errorf("port of %s must be a number from 1 to 65535", quote(s))
		}
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return HostPort{Host: ip.Unmap().WithZone("").String(), Port: port}, nil
	}
	if strings.Contains(host, ":") {
		return HostPort{}, fmt.Errorf("%s is not a host: write an IPv6 address in brackets with a port, like \"[2001:db8::1]:8080\"", quote(s))
	}
	if !validHostname(host) {
		return HostPort{}, fmt.Errorf("%s is not a host name (letters, digits, '-' and '.', labels of 1 to 63 characters), %s", quote(s), like)
	}
	return HostPort{Host: strings.ToLower(strings.TrimSuffix(host, ".")), Port: port}, nil
}

// validHostname checks a DNS name's syntax (RFC 1123 labels; '_' is
// accepted, as resolvers do).
func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// Enabled reports whether admin tokens are configured. Without any, the
// operator API answers loopback clients only.
func (a Admin) Enabled() bool { return len(a.Tokens) > 0 }

// Lookup finds the configured token matching the presented secret. Every
// configured token is compared, each in constant time over SHA-256
// digests, so neither the match nor a token's length shows in the time
// taken.
func (a Admin) Lookup(secret string) (AdminToken, bool) {
	if secret == "" {
		return AdminToken{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range a.Tokens {
		if subtle.ConstantTimeCompare(a.Tokens[i].digest[:], sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return AdminToken{}, false
	}
	return a.Tokens[found], true
}

// AdminToken is one configured admin token. Only the SHA-256 digest of its
// secret is kept, so the config in memory holds no secret either.
type AdminToken struct {
	Role   Role
	Name   string // who holds it, for logs and events; default "token N"
	Hashed bool   // given as "sha256:<hex>" in the file
	digest [sha256.Size]byte
}

// NewAdminToken builds a token from its config form: "sha256:<64 hex>" or
// a plain secret. It is what the config decoder uses, exported for tests
// and programs that build a Config in code.
func NewAdminToken(token string, role Role, name string) (AdminToken, error) {
	t := AdminToken{Role: role, Name: name}
	if err := t.setToken(token); err != nil {
		return AdminToken{}, err
	}
	return t, nil
}

// ParseAdminToken checks the config form of a token and returns the
// SHA-256 digest it stands for.
func ParseAdminToken(token string) (digest [sha256.Size]byte, hashed bool, err error) {
	return parseToken(token, MinPlainTokenChars)
}

// parseToken is ParseAdminToken with the shortest plain token allowed.
func parseToken(token string, minPlain int) (digest [sha256.Size]byte, hashed bool, err error) {
	if hexPart, ok := strings.CutPrefix(token, hashPrefix); ok {
		if len(hexPart) != 2*sha256.Size {
			return digest, true, fmt.Errorf("sha256 token must be \"sha256:\" and 64 hex digits, got %d characters after the prefix", len(hexPart))
		}
		b, err := hex.DecodeString(hexPart)
		if err != nil {
			return digest, true, fmt.Errorf("sha256 token must be \"sha256:\" and 64 hex digits: %v", err)
		}
		copy(digest[:], b)
		return digest, true, nil
	}
	switch {
	case strings.TrimSpace(token) == "":
		return digest, false, fmt.Errorf("must not be empty")
	case strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return digest, false, fmt.Errorf("must not contain spaces or control characters (it is sent in an Authorization header)")
	case len([]rune(token)) < minPlain:
		return digest, false, fmt.Errorf("a plain token must be at least %d characters, got %d; better, give its hash: \"sha256:\" + the hex SHA-256 of the token (printf %%s TOKEN | sha256sum)",
			minPlain, len([]rune(token)))
	}
	return sha256.Sum256([]byte(token)), false, nil
}

func (t *AdminToken) setToken(token string) error {
	d, hashed, err := ParseAdminToken(token)
	if err != nil {
		return err
	}
	t.digest, t.Hashed = d, hashed
	return nil
}

// String describes t without revealing its secret or digest.
func (t AdminToken) String() string {
	return fmt.Sprintf("{Name:%s Role:%s redacted}", t.Name, t.Role)
}

// GoString is String: %#v must not print the digest either.
func (t AdminToken) GoString() string { return t.String() }

// admin decodes the "admin" block.
func (w *walker) admin(path string, n *node) Admin {
	var a Admin
	f := w.fields(path, n, "admin")
	if f == nil {
		return a
	}
	if e, ok := f["metricsRequireToken"]; ok {
		a.MetricsRequireToken, _ = w.boolean(join(path, e.key), e.val)
	}
	if e, ok := f["allowedHosts"]; ok {
		a.AllowedHosts = w.allowedHosts(join(path, e.key), e.val)
	}
	e, ok := f["tokens"]
	if !ok {
		return a
	}
	p := join(path, e.key)
	if e.val.kind != kArray {
		w.errorf(p, "must be an array of {\"token\", \"role\", \"name\"} objects, got %s", e.val.kind)
		return a
	}
	if len(e.val.elems) == 0 {
		w.errorf(p, "must not be empty (leave tokens out to serve loopback clients only)")
	}
	seen := map[[sha256.Size]byte]string{}
	names := map[string]string{}
	for i, el := range e.val.elems {
		tp := index(p, i)
		t, ok := w.adminToken(tp, el, i)
		if !ok {
			continue
		}
		if prev, dup := seen[t.digest]; dup {
			w.errorf(tp, "the same token as %s", prev)
			continue
		}
		if prev, dup := names[t.Name]; dup {
			w.errorf(join(tp, "name"), "name %s is already used by %s", quote(t.Name), prev)
			continue
		}
		seen[t.digest], names[t.Name] = tp, tp
		a.Tokens = append(a.Tokens, t)
	}
	return a
}

// allowedHosts decodes admin.allowedHosts: an array of hosts.
func (w *walker) allowedHosts(path string, n *node) []HostPort {
	if n.kind != kArray {
		w.errorf(path, `must be an array of host names like ["ops.example.com"], got %s`, n.kind)
		return nil
	}
	var out []HostPort
	seen := map[HostPort]string{}
	for i, el := range n.elems {
		p := index(path, i)
		s, ok := w.str(p, el)
		if !ok {
			continue
		}
		h, err := ParseHostPort(s)
		if err != nil {
			w.errorf(p, "%v", err)
			continue
		}
		if prev, dup := seen[h]; dup {
			w.errorf(p, "%s is already listed at %s", quote(s), prev)
			continue
		}
		seen[h] = p
		out = append(out, h)
	}
	return out
}

func (w *walker) adminToken(path string, n *node, i int) (AdminToken, bool) {
	t := AdminToken{Name: fmt.Sprintf("token %d", i)}
	f := w.fields(path, n, "admin.tokens.[]")
	if f == nil {
		return t, false
	}
	ok := true
	if e, has := f["token"]; !has {
		w.errorf(join(path, "token"), "required (\"sha256:<64 hex digits>\" or a plain token)")
		ok = false
	} else if s, good := w.str(join(path, e.key), e.val); !good {
		ok = false
	} else if err := t.setToken(s); err != nil {
		w.errorf(join(path, e.key), "%v", err) // never the value: it is a secret
		ok = false
	}
	if e, has := f["role"]; !has {
		w.errorf(join(path, "role"), "required (\"viewer\" or \"operator\")")
		ok = false
	} else if s, good := w.str(join(path, e.key), e.val); !good {
		ok = false
	} else {
		switch s {
		case "viewer":
			t.Role = RoleViewer
		case "operator":
			t.Role = RoleOperator
		default:
			w.errorf(join(path, e.key), "unknown role %s (roles: viewer, operator)", quote(s))
			ok = false
		}
	}
	if e, has := f["name"]; has {
		if s, good := w.nonEmpty(join(path, e.key), e.val); good {
			t.Name = s
		} else {
			ok = false
		}
	}
	return t, ok
}
