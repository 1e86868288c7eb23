package terminal

import (
	"slices"
	"testing"
)

func TestPlainWords(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string][]string{
		"gemini --acp":           {"gemini", "--acp"},
		"/bin/agent 'a b' c":     {"/bin/agent", "a b", "c"},
		"npx x | tee log":        nil,
		"run {message}":          nil,
		"A=1 agent":              nil,
		"  ":                     nil,
		"node /opt/agent.js --x": {"node", "/opt/agent.js", "--x"},
	} {
		got, ok := PlainWords(cmd)
		if ok != (want != nil) || !slices.Equal(got, want) {
			t.Errorf("PlainWords(%q) = %q, %v; want %q", cmd, got, ok, want)
		}
	}
}
