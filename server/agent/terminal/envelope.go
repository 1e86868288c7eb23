package terminal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"

	"termlink/server/config"
)

// ProtocolVersion is the envelope's "version".
const ProtocolVersion = 1

// Envelope is the JSON line an agent reads on stdin.
type Envelope struct {
	Version     int                         `json:"version"`
	Text        string                      `json:"text"`
	Media       []string                    `json:"media,omitempty"` // only with passMedia and media
	Channel     string                      `json:"channel"`
	ChatID      string                      `json:"chat_id"`
	SessionKey  string                      `json:"session_key"`
	Workspace   string                      `json:"workspace"`
	UserDataDir string                      `json:"user_data_dir"`
	Providers   map[string]EnvelopeProvider `json:"providers,omitempty"` // only when configured
}

// EnvelopeProvider is a provider as an agent sees it (snake_case keys).
type EnvelopeProvider struct {
	APIKeys []string `json:"api_keys"`
	Models  []string `json:"models,omitempty"`
	BaseURL string   `json:"base_url,omitempty"`
}

// Marshal encodes e as the agent gets it: one line of JSON and a newline,
// with <, > and & not escaped.
func (e *Envelope) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// envelopeProviders converts the config's providers; nil when none.
func envelopeProviders(ps map[string]config.Provider) map[string]EnvelopeProvider {
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]EnvelopeProvider, len(ps))
	for name, p := range ps {
		keys := append([]string{}, p.APIKeys...) // [] rather than null: api_keys is always present
		out[name] = EnvelopeProvider{APIKeys: keys, Models: append([]string(nil), p.Models...), BaseURL: p.BaseURL}
	}
	return out
}

// UserDataDir returns {workspace}/users/{chat id}, the chat id made a safe
// single path element by [DirName].
func UserDataDir(workspace, chatID string) string {
	return filepath.Join(workspace, "users", DirName(chatID))
}

// maxDirName bounds DirName's result, well under NAME_MAX (255).
const maxDirName = 128

// DirName makes a chat id a directory name that cannot escape its parent:
// bytes outside [A-Za-z0-9._:@+=-] become '_', a leading '.' becomes '_',
// and the empty id is "_". When anything was changed, or the name was
// longer than 128 bytes (then cut), "-" and 12 hex digits of the id's
// SHA-256 are appended, so distinct ids keep distinct directories. Ids
// made only of allowed bytes are kept as they are.
func DirName(chatID string) string {
	var b strings.Builder
	changed := chatID == ""
	for i := 0; i < len(chatID); i++ {
		c := chatID[i]
		if dirByte(c) && !(i == 0 && c == '.') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		changed = true
	}
	name := b.String()
	if len(name) > maxDirName {
		name = name[:maxDirName]
		changed = true
	}
	if !changed {
		return name
	}
	sum := sha256.Sum256([]byte(chatID))
	if name == "" {
		name = "_"
	}
	return name + "-" + hex.EncodeToString(sum[:6])
}

func dirByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("._:@+=-", c) >= 0
}

// mergeEnv returns parent with extra's variables set, replacing any of the
// same name.
func mergeEnv(parent []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return parent
	}
	out := make([]string, 0, len(parent)+len(extra))
	for _, kv := range parent {
		name, _, _ := strings.Cut(kv, "=")
		if _, over := extra[name]; !over {
			out = append(out, kv)
		}
	}
	names := make([]string, 0, len(extra))
	for k := range extra {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		out = append(out, k+"="+extra[k])
	}
	return out
}

// ShellQuote quotes s for a POSIX shell as one word: in single quotes,
// each embedded single quote closed, escaped and reopened:
//
//	it's  ->  'it'\''s'
//
// Nothing in it is expanded: $, `, \ and newlines stay literal. NUL bytes,
// which no argument can hold, are dropped.
func ShellQuote(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ExpandCommand replaces every "{message}" in a command template with the
// shell-quoted text.
func ExpandCommand(template, text string) string {
	if !strings.Contains(template, "{message}") {
		return template
	}
	return strings.ReplaceAll(template, "{message}", ShellQuote(text))
}
