package config

import (
	"fmt"
	"strings"
	"testing"
)

func sprint(v any) string { return fmt.Sprintf("%+v", v) }

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		designExample, designExampleSnake, fullCamel, fullSnake,
		``, `{}`, `[]`, `null`, `{"channels": {}}`, `{"channels": {"a": null}}`,
		`{"channels": {"c": {"accountId": "a", "config": {"tokens": {"p": "t"}}}}}`,
		`{"channels": {"t": {"accountId": "a"}}, "cluster": {"nats": "nats://x:1", "role": "all", "name": "a", "historyMaxAgeDays": 0, "history_max_megabytes": 1e3, "consumerStuckSeconds": 1e400}}`,
		`{"maxConcurrentRuns": 1e400}`, `{"a": 1, "a": 2}`, "{\"\x00\": 1}",
		`{"agents": {"x": {"harness": {"command": "c", "target": "serial:@"}}}}`,
		`{"agents": {"c": {"acp": {"command": "x", "args": [1, "a"], "env": {"": "v"}, "permission": "ask", "askTimeout": 0}}}}`,
		`{"agents": {"n": {"nuum": {"command": "x", "turnTimeout": 0, "heartbeatAck": "optional"}}}}`,
		// keys of other blocks: the "it belongs in" hints
		`{"enrollment": true, "channels": {"c.d": {"accountId": "a", "enrollment": 1, "config": {"agent": "x"}}}, "admin": {"tokens": [{"tokens": 1}]}, "agents": {"h": {"command": "x", "terminal": {"idleTimeout": 1, "providers": {"p.q": {"timeout": 1}}}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if cfg != nil {
				t.Fatal("config returned with an error")
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "config: ") {
					t.Fatalf("error line does not start with \"config: \": %q", line)
				}
			}
			return
		}
		if len(cfg.Channels) == 0 {
			t.Fatal("no channels and no error")
		}
		for id, ch := range cfg.Channels {
			if _, ok := cfg.Agents[ch.Agent]; !ok {
				t.Fatalf("channel %q uses undefined agent %q", id, ch.Agent)
			}
		}
	})
}
