package acp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"

	"termlink/server/agent"
	"termlink/server/agent/stdio"
	"termlink/server/config"
)

// fuzzTurn is a turn outside any process, for the parsers.
func fuzzTurn(policy string) (*turn, *[]string) {
	r := &Runner{name: "f", cfg: config.ACPAgent{Permission: policy}, opt: Options{MaxReplyBytes: 1 << 10}}
	p := &proc{r: r, Proc: &stdio.Proc{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	var prog []string
	t := p.newTurn(agent.Request{}, func(s string) { prog = append(prog, s) })
	return t, &prog
}

// Any session/update the SDK decodes is handled without panic; progress
// lines stay one short line; the reply stays within its bound.
func FuzzSessionUpdate(f *testing.F) {
	for _, s := range []string{
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"tool_call","toolCallId":"1","title":"Read\nfile","status":"pending"}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"tool_call_update","toolCallId":"1","status":"completed"}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"tool_call_update","toolCallId":"9","title":null}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"in_progress"}]}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"x"}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"mystery"}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"","mimeType":"x"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var n sdk.SessionNotification
		if json.Unmarshal(data, &n) != nil {
			return
		}
		tr, prog := fuzzTurn("reject")
		tr.update(n.Update)
		tr.update(n.Update)
		for _, p := range *prog {
			if strings.Contains(p, "\n") || utf8.RuneCountInString(p) > progressRunes {
				t.Fatalf("progress line %q", p)
			}
		}
		if tr.reply.Len() > 1<<10 {
			t.Fatalf("reply of %d bytes past its bound", tr.reply.Len())
		}
		_ = tr.result(sdk.StopReasonEndTurn)
	})
}

// Any permission request is answered by the reject and allow_once
// policies with one of its own options or cancelled, never an "always"
// allow; the answer to a question is a number in range.
func FuzzPermission(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s","toolCall":{"toolCallId":"1","title":"Edit"},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"},{"optionId":"r","name":"Skip","kind":"reject_once"}]}`), " 2 ")
	f.Add([]byte(`{"sessionId":"s","toolCall":{"toolCallId":"1"},"options":[{"optionId":"aa","name":"Always","kind":"allow_always"}]}`), "1")
	f.Add([]byte(`{"sessionId":"s","toolCall":{"toolCallId":"1"},"options":[]}`), "-0")
	f.Fuzz(func(t *testing.T, data []byte, answer string) {
		var req sdk.RequestPermissionRequest
		if json.Unmarshal(data, &req) != nil {
			return
		}
		for _, policy := range []string{"reject", "allow_once"} {
			tr, _ := fuzzTurn(policy)
			resp := tr.permission(context.Background(), req)
			if resp.Outcome.Cancelled != nil {
				continue
			}
			sel := resp.Outcome.Selected
			if sel == nil {
				t.Fatalf("policy %s: no outcome", policy)
			}
			found := false
			for _, o := range req.Options {
				if o.OptionId == sel.OptionId {
					found = true
					if o.Kind == sdk.PermissionOptionKindAllowAlways || (policy == "reject" && o.Kind == sdk.PermissionOptionKindAllowOnce) {
						t.Fatalf("policy %s picked %s", policy, o.Kind)
					}
				}
			}
			if !found {
				t.Fatalf("policy %s picked %q, not an offered option", policy, sel.OptionId)
			}
		}
		q := questionText(answer, req.Options)
		if strings.Contains(q, "\n") && !strings.Contains(answer, "\n") {
			t.Fatalf("question %q", q)
		}
		if i, ok := parseAnswer(answer, len(req.Options)); ok && (i < 1 || i > len(req.Options)) {
			t.Fatalf("answer %q read as %d of %d", answer, i, len(req.Options))
		}
	})
}
