package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

const adminCh = `"channels": {"c": {"accountId": "a"}}`

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestAdminValid(t *testing.T) {
	in := `{` + adminCh + `, "admin": {"tokens": [
	  {"token": "` + sha("viewer-secret-0123") + `", "role": "viewer", "name": "alice"},
	  {"token": "operator-plain-token-42", "role": "operator"}],
	  "metricsRequireToken": true}}`
	cfg, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Admin
	if !a.Enabled() || !a.MetricsRequireToken || len(a.Tokens) != 2 {
		t.Fatalf("admin = %v", a)
	}
	tests := []struct {
		secret string
		role   Role
		name   string
		ok     bool
	}{
		{"viewer-secret-0123", RoleViewer, "alice", true},
		{"operator-plain-token-42", RoleOperator, "token 1", true},
		{"operator-plain-token-4", RoleNone, "", false},
		{sha("viewer-secret-0123"), RoleNone, "", false}, // the hash is not the secret
		{"", RoleNone, "", false},
	}
	for _, tt := range tests {
		got, ok := a.Lookup(tt.secret)
		if ok != tt.ok || got.Role != tt.role || (ok && got.Name != tt.name) {
			t.Errorf("Lookup(%q) = %v, %v; want role %v name %q ok %v", tt.secret, got, ok, tt.role, tt.name, tt.ok)
		}
	}
	if !a.Tokens[0].Hashed || a.Tokens[1].Hashed {
		t.Errorf("Hashed = %v, %v", a.Tokens[0].Hashed, a.Tokens[1].Hashed)
	}
	snake, err := Parse([]byte(`{` + adminCh + `, "admin": {"tokens": [{"token": "operator-plain-token-42", "role": "operator"}], "metrics_require_token": true}}`))
	if err != nil || !snake.Admin.MetricsRequireToken {
		t.Fatalf("snake_case: %v %v", snake, err)
	}
	none, err := Parse([]byte(`{` + adminCh + `, "admin": {}}`))
	if err != nil || none.Admin.Enabled() {
		t.Fatalf("empty admin block: %v, %v", none, err)
	}
}

func TestAdminErrors(t *testing.T) {
	long := "operator-plain-token-42"
	tests := []struct {
		name, admin string
		want        []string
	}{
		{"not an object", `[]`, []string{"config: admin: must be an object, got array"}},
		{"unknown key", `{"token": []}`, []string{"config: admin.token: unknown key (known: tokens, metricsRequireToken, allowedHosts); it belongs in admin.tokens[N].token"}},
		{"tokens not an array", `{"tokens": {"a": "b"}}`, []string{`config: admin.tokens: must be an array of {"token", "role", "name"} objects, got object`}},
		{"tokens empty", `{"tokens": []}`, []string{"config: admin.tokens: must not be empty (leave tokens out to serve loopback clients only)"}},
		{"token a string", `{"tokens": ["abc"]}`, []string{"config: admin.tokens[0]: must be an object, got string"}},
		{"missing token and role", `{"tokens": [{}]}`, []string{
			`config: admin.tokens[0].role: required ("viewer" or "operator")`,
			`config: admin.tokens[0].token: required ("sha256:<64 hex digits>" or a plain token)`}},
		{"bad role", `{"tokens": [{"token": "` + long + `", "role": "admin"}]}`, []string{
			`config: admin.tokens[0].role: unknown role "admin" (roles: viewer, operator)`}},
		{"short plain token", `{"tokens": [{"token": "secret", "role": "viewer"}]}`, []string{
			`config: admin.tokens[0].token: a plain token must be at least 16 characters, got 6; better, give its hash: "sha256:" + the hex SHA-256 of the token (printf %s TOKEN | sha256sum)`}},
		{"space in token", `{"tokens": [{"token": "operator plain token 42", "role": "viewer"}]}`, []string{
			`config: admin.tokens[0].token: must not contain spaces or control characters (it is sent in an Authorization header)`}},
		{"short hash", `{"tokens": [{"token": "sha256:abcd", "role": "viewer"}]}`, []string{
			`config: admin.tokens[0].token: sha256 token must be "sha256:" and 64 hex digits, got 4 characters after the prefix`}},
		{"bad hex", `{"tokens": [{"token": "sha256:` + strings.Repeat("zz", 32) + `", "role": "viewer"}]}`, []string{
			`config: admin.tokens[0].token: sha256 token must be "sha256:" and 64 hex digits: encoding/hex: invalid byte: U+007A 'z'`}},
		{"token not a string", `{"tokens": [{"token": 5, "role": "viewer"}]}`, []string{`config: admin.tokens[0].token: must be a string, got number`}},
		{"same token twice, plain and hashed", `{"tokens": [{"token": "` + long + `", "role": "viewer"}, {"token": "` + sha(long) + `", "role": "operator"}]}`, []string{
			`config: admin.tokens[1]: the same token as admin.tokens[0]`}},
		{"same name twice", `{"tokens": [{"token": "` + long + `", "role": "viewer", "name": "bob"}, {"token": "` + long + `x", "role": "operator", "name": "bob"}]}`, []string{
			`config: admin.tokens[1].name: name "bob" is already used by admin.tokens[0]`}},
		{"empty name", `{"tokens": [{"token": "` + long + `", "role": "viewer", "name": " "}]}`, []string{`config: admin.tokens[0].name: must not be empty`}},
		{"metrics switch not a bool", `{"metricsRequireToken": "yes"}`, []string{`config: admin.metricsRequireToken: must be a boolean (true or false), got string`}},
		{"allowed hosts not an array", `{"allowedHosts": "ops.example.com"}`, []string{`config: admin.allowedHosts: must be an array of host names like ["ops.example.com"], got string`}},
		{"allowed host with a scheme", `{"allowed_hosts": ["https://ops.example.com"]}`, []string{
			`config: admin.allowed_hosts[0]: "https://ops.example.com" is not a host: give the name only (no scheme, path or wildcard), like "ops.example.com" or "ops.example.com:8443"`}},
		{"allowed host wildcard", `{"allowedHosts": ["ok.example", "*.example.com"]}`, []string{
			`config: admin.allowedHosts[1]: "*.example.com" is not a host: give the name only (no scheme, path or wildcard), like "ops.example.com" or "ops.example.com:8443"`}},
		{"allowed host bad port", `{"allowedHosts": ["ops.example.com:0", "ops.example.com:http"]}`, []string{
			`config: admin.allowedHosts[0]: port of "ops.example.com:0" must be a number from 1 to 65535`,
			`config: admin.allowedHosts[1]: port of "ops.example.com:http" must be a number from 1 to 65535`}},
		{"allowed host bad name", `{"allowedHosts": ["ops..example", "", 5]}`, []string{
			`config: admin.allowedHosts[0]: "ops..example" is not a host name (letters, digits, '-' and '.', labels of 1 to 63 characters), like "ops.example.com" or "ops.example.com:8443"`,
			`config: admin.allowedHosts[1]: must not be empty: give a host name like "ops.example.com" or "ops.example.com:8443"`,
			`config: admin.allowedHosts[2]: must be a string, got number`}},
		{"allowed host twice", `{"allowedHosts": ["Ops.Example.com", "ops.example.com."]}`, []string{
			`config: admin.allowedHosts[1]: "ops.example.com." is already listed at admin.allowedHosts[0]`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(`{` + adminCh + `, "admin": ` + tt.admin + `}`))
			if err == nil {
				t.Fatal("no error")
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("error:\n%s\nwant:\n%s", err, strings.Join(tt.want, "\n"))
			}
			if strings.Contains(err.Error(), long) {
				t.Errorf("the error shows the token: %s", err)
			}
		})
	}
}

func TestAdminAllowedHosts(t *testing.T) {
	cfg, err := Parse([]byte(`{` + adminCh + `, "admin": {"allowedHosts": ["Ops.Example.com", "kiosk.lan:8443", "10.0.0.5", "[2001:db8::1]:8080", "[::1]"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []HostPort{{"ops.example.com", ""}, {"kiosk.lan", "8443"}, {"10.0.0.5", ""}, {"2001:db8::1", "8080"}, {"::1", ""}}
	if fmt.Sprint(cfg.Admin.AllowedHosts) != fmt.Sprint(want) {
		t.Fatalf("allowedHosts = %v, want %v", cfg.Admin.AllowedHosts, want)
	}
	if cfg.Admin.Enabled() {
		t.Error("allowedHosts alone turned admin tokens on")
	}
	for _, tt := range []struct {
		h          HostPort
		host, port string
		ok         bool
	}{
		{want[0], "ops.example.com", "443", true},
		{want[0], "evil.example.com", "443", false},
		{want[1], "kiosk.lan", "8443", true},
		{want[1], "kiosk.lan", "80", false},
		{want[3], "2001:db8::1", "8080", true},
	} {
		if got := tt.h.Allows(tt.host, tt.port); got != tt.ok {
			t.Errorf("%v.Allows(%q, %q) = %v, want %v", tt.h, tt.host, tt.port, got, tt.ok)
		}
	}
}

func TestAdminTokenNotPrinted(t *testing.T) {
	secret := "operator-plain-token-42"
	cfg, err := Parse([]byte(`{` + adminCh + `, "admin": {"tokens": [{"token": "` + secret + `", "role": "operator", "name": "ops"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(secret))
	for _, s := range []string{fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg.Admin), fmt.Sprintf("%#v", cfg.Admin.Tokens)} {
		if strings.Contains(s, secret) || strings.Contains(s, hex.EncodeToString(sum[:])) || strings.Contains(s, fmt.Sprint(sum[0], " ", sum[1])) {
			t.Errorf("secret or digest printed: %s", s)
		}
	}
	if s := fmt.Sprint(cfg.Admin.Tokens[0]); !strings.Contains(s, "ops") || !strings.Contains(s, "operator") {
		t.Errorf("name and role missing: %s", s)
	}
}

// FuzzParseAdminToken: any string is accepted or refused with a message
// that never holds it; an accepted token matches itself (plain) or the
// secret whose hash it is.
func FuzzParseAdminToken(f *testing.F) {
	for _, s := range []string{"", "sha256:", sha("x"), "operator-plain-token-42", "sha256:" + strings.Repeat("A", 64), "tok\x00en-0123456789abc", "ünïcödé-token-ünïcödé"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, hashed, err := ParseAdminToken(s)
		if err != nil {
			if len(s) > len("sha256:")+1 && strings.Contains(err.Error(), s) {
				t.Fatalf("error shows the token: %v", err)
			}
			return
		}
		if hashed != strings.HasPrefix(s, "sha256:") {
			t.Fatalf("hashed = %v for %q", hashed, s)
		}
		a := Admin{Tokens: []AdminToken{{Role: RoleViewer, digest: d}}}
		if !hashed {
			if _, ok := a.Lookup(s); !ok {
				t.Fatalf("plain token %q does not match itself", s)
			}
		}
		if _, ok := a.Lookup(s + "x"); ok && !hashed {
			t.Fatalf("%q matches a longer secret", s)
		}
	})
}

// FuzzParseHostPort: any string is accepted or refused without a panic;
// an accepted host is lower case, prints back to itself and allows
// itself.
func FuzzParseHostPort(f *testing.F) {
	for _, s := range []string{"", "ops.example.com", "OPS.example.com:8443", "[::1]:80", "[::1]", "10.0.0.1:65535", "::ffff:127.0.0.1",
		"a:b:c", "https://x", "x:0", "-x.example", "[fe80::1%eth0]:80", "ü.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHostPort(s)
		if err != nil {
			return
		}
		if h.Host == "" || h.Host != strings.ToLower(h.Host) {
			t.Fatalf("ParseHostPort(%q) = %#v: empty or not lower case", s, h)
		}
		back, err := ParseHostPort(h.String())
		if err != nil || back != h {
			t.Fatalf("ParseHostPort(%q) = %#v; its String %q parses to %#v, %v", s, h, h.String(), back, err)
		}
		port := h.Port
		if port == "" {
			port = "80"
		}
		if !h.Allows(h.Host, port) {
			t.Fatalf("%#v does not allow itself", h)
		}
	})
}
