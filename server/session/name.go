package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// fileExt is the extension of every session file.
const fileExt = ".jsonl"

// maxNameLen is the longest file name (NAME_MAX on Linux and macOS).
const maxNameLen = 255

// hashMark separates the kept prefix of a long key's escaped name from the
// hash of the key; FileName never writes it otherwise ('~' is escaped).
const hashMark = '~'

// hashedPrefixLen is how many bytes of the escaped key a hashed name keeps,
// so a person listing the directory still sees whose session it is.
const hashedPrefixLen = 120

var errEmptyKey = errors.New("empty session key")

// ErrHashedName is wrapped by KeyFromFileName for a hashed file name: the
// key is not in the name, only in the file's metadata line.
var ErrHashedName = errors.New("hashed file name: the key is in the metadata line")

// FileName returns the base name of the file that holds the session key:
// the key with every byte outside [A-Za-z0-9._:-] and a leading '.'
// percent-encoded, plus ".jsonl". When that would be longer than 255 bytes
// (NAME_MAX), the name is the first 120 bytes of the escaped key, '~', the
// SHA-256 of the key in hex, and ".jsonl": the key itself is then only in
// the metadata line (nanobot's "key"). It fails only for an empty key.
func FileName(key string) (string, error) {
	if key == "" {
		return "", errEmptyKey
	}
	var name string
	if plainKey(key) {
		name = key + fileExt // the common case: one allocation
	} else {
		name = escapeKey(key) + fileExt
	}
	if len(name) <= maxNameLen {
		return name, nil
	}
	sum := sha256.Sum256([]byte(key))
	prefix := name[:hashedPrefixLen]
	// Do not cut a %XX escape in two: the prefix stays readable.
	if i := strings.LastIndexByte(prefix, '%'); i >= 0 && i > len(prefix)-3 {
		prefix = prefix[:i]
	}
	return prefix + string(hashMark) + hex.EncodeToString(sum[:]) + fileExt, nil
}

// IsHashedName reports whether name is a hashed file name (see [FileName]).
func IsHashedName(name string) bool {
	return strings.IndexByte(name, hashMark) >= 0
}

// escapeKey percent-encodes key as FileName does, without the extension.
func escapeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) + len(fileExt))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plainByte(c) && !(i == 0 && c == '.') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0x0f])
	}
	return b.String()
}

// KeyFromFileName reverses [FileName]: it strips ".jsonl" and decodes the
// %XX escapes. It fails for a name FileName cannot have produced, and with
// an error wrapping [ErrHashedName] for a hashed name (the key is then read
// from the file's metadata line).
func KeyFromFileName(name string) (string, error) {
	base, ok := strings.CutSuffix(name, fileExt)
	if !ok || base == "" {
		return "", fmt.Errorf("file name %q is not <key>%s", name, fileExt)
	}
	if IsHashedName(base) {
		return "", fmt.Errorf("file name %q: %w", name, ErrHashedName)
	}
	if base[0] == '.' {
		return "", fmt.Errorf("file name %q starts with an unescaped '.'", name)
	}
	var b strings.Builder
	b.Grow(len(base))
	for i := 0; i < len(base); i++ {
		c := base[i]
		if c != '%' {
			if !plainByte(c) {
				return "", fmt.Errorf("file name %q has unescaped byte %q", name, c)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(base) {
			return "", fmt.Errorf("file name %q has a truncated %%-escape", name)
		}
		hi, ok1 := unhex(base[i+1])
		lo, ok2 := unhex(base[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("file name %q has a bad %%-escape %q", name, base[i:i+3])
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	key := b.String()
	if canon, err := FileName(key); err != nil || canon != name {
		return "", fmt.Errorf("file name %q is not the canonical name of key %q", name, key)
	}
	return key, nil
}

// plainKey reports whether escapeKey(key) == key.
func plainKey(key string) bool {
	for i := 0; i < len(key); i++ {
		if !plainByte(key[i]) || (i == 0 && key[i] == '.') {
			return false
		}
	}
	return true
}

func plainByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '-':
		return true
	}
	return false
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
