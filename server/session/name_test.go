package session

import (
	"strings"
	"testing"
)

func TestFileName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, name string
	}{
		{"terminal-dev:local:device-001", "terminal-dev:local:device-001.jsonl"},
		{"terminal-dev:local:device-001:thread-7", "terminal-dev:local:device-001:thread-7.jsonl"},
		{"telegram:12345", "telegram:12345.jsonl"},
		{"a/b", "a%2Fb.jsonl"},
		{"../x", "%2E.%2Fx.jsonl"},
		{"..", "%2E..jsonl"},
		{".hidden", "%2Ehidden.jsonl"},
		{"a.b_c", "a.b_c.jsonl"},
		{"a b%", "a%20b%25.jsonl"},
		{"a\\b\x00", "a%5Cb%00.jsonl"},
		{"é", "%C3%A9.jsonl"},
		{"日本", "%E6%97%A5%E6%9C%AC.jsonl"},
	}
	for _, tt := range tests {
		got, err := FileName(tt.key)
		if err != nil || got != tt.name {
			t.Errorf("FileName(%q) = %q, %v; want %q", tt.key, got, err, tt.name)
			continue
		}
		back, err := KeyFromFileName(got)
		if err != nil || back != tt.key {
			t.Errorf("KeyFromFileName(%q) = %q, %v; want %q", got, back, err, tt.key)
		}
	}
}

func TestFileNameErrors(t *testing.T) {
	t.Parallel()
	if _, err := FileName(""); err == nil {
		t.Error("FileName(\"\") did not fail")
	}
	if _, err := FileName(strings.Repeat("a", 249)); err != nil {
		t.Errorf("249-byte key: %v", err)
	}
	if name, err := FileName(strings.Repeat("a", 250)); err != nil || !IsHashedName(name) || len(name) > 255 {
		t.Errorf("250-byte key (256-byte name): %q, %v; want a hashed name", name, err)
	}
	if name, err := FileName(strings.Repeat("/", 83)); err != nil || IsHashedName(name) {
		t.Errorf("83 escaped bytes (249+6): %q, %v", name, err)
	}
	if name, err := FileName(strings.Repeat("/", 84)); err != nil || !IsHashedName(name) || len(name) > 255 {
		t.Errorf("84 escaped bytes (252+6): %q, %v; want a hashed name", name, err)
	}
	for _, name := range []string{
		"x.txt", ".jsonl", ".x.jsonl", "%zz.jsonl", "%4.jsonl", "a%.jsonl",
		"%41.jsonl", // non-canonical: 'A' needs no escape
		"%2f.jsonl", // non-canonical: lower-case hex
		"a b.jsonl",
	} {
		if k, err := KeyFromFileName(name); err == nil {
			t.Errorf("KeyFromFileName(%q) = %q, want an error", name, k)
		}
	}
}

// FileName's fast path for plain keys names files as escapeKey does, and
// every name that is not hashed gives its key back.
func FuzzFileName(f *testing.F) {
	for _, k := range []string{"terminal-dev:local:dev-1", ".hidden", "a/b", "x.y_z:1", "ü", "a%3A"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if plainKey(key) != (escapeKey(key) == key) {
			t.Fatalf("plainKey(%q) = %v, but escapeKey gives %q", key, plainKey(key), escapeKey(key))
		}
		name, err := FileName(key)
		if err != nil {
			if key != "" {
				t.Fatalf("FileName(%q): %v", key, err)
			}
			return
		}
		if IsHashedName(name) {
			return
		}
		if back, err := KeyFromFileName(name); err != nil || back != key {
			t.Fatalf("FileName(%q) = %q, which gives back %q, %v", key, name, back, err)
		}
	})
}
