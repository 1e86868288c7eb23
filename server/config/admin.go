package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
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
	case len([]rune(token)) < MinPlainTokenChars:
		return digest, false, fmt.Errorf("a plain token must be at least %d characters, got %d; better, give its hash: \"sha256:\" + the hex SHA-256 of the token (printf %%s TOKEN | sha256sum)",
			MinPlainTokenChars, len([]rune(token)))
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
	f := w.fields(path, n, "tokens", "metricsRequireToken")
	if f == nil {
		return a
	}
	if e, ok := f["metricsRequireToken"]; ok {
		a.MetricsRequireToken, _ = w.boolean(join(path, e.key), e.val)
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

func (w *walker) adminToken(path string, n *node, i int) (AdminToken, bool) {
	t := AdminToken{Name: fmt.Sprintf("token %d", i)}
	f := w.fields(path, n, "token", "role", "name")
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
