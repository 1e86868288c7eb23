// Command acpagent is a scripted agent speaking the Agent Client Protocol
// (ACP v1: JSON-RPC 2.0, one message per line on stdin and stdout),
// written on encoding/json alone so that it is independent of the SDK the
// server uses. termlink's tests run it through termlink/server/agent/acp;
// the latency bench (testrig/bench/acpbench) also talks to it directly.
//
// It answers initialize (protocol version 1, or --protocol N) and
// session/new, then answers each session/prompt with the message chunks
// "You said: " and the prompt's text and stopReason end_turn. A
// session/cancel ends the turn in progress with stopReason cancelled. It
// exits when stdin ends.
//
// Prompts that are commands:
//
//	/tool NAME     tool_call NAME (pending), tool_call_update in_progress and
//	               completed, then the text "used NAME"
//	/plan          a plan of three entries (one done, one in progress), then "planned"
//	/perm          a tool_call and a session/request_permission with the options
//	               1 "Allow" (allow_once) and 2 "Skip" (reject_once); the text says
//	               "allowed", "rejected" or, when answered cancelled, the turn
//	               ends with stopReason cancelled
//	/slow N        sleep N ms (a session/cancel ends it: stopReason cancelled)
//	/chunks N      N message chunks "x"
//	/gate PATH TEXT  the first word of TEXT as a message chunk, then, once the
//	               file PATH exists, the other words at once (a test sees the
//	               first while the turn waits); a session/cancel while it
//	               waits ends the turn with stopReason cancelled
//	/stream MS TEXT  the words of TEXT as message chunks, one every MS ms (each
//	               word with the space after it); a session/cancel ends it
//	               with stopReason cancelled after the words sent so far
//	/thought       an agent_thought_chunk, then "thought"
//	/unknown       a session/update of a kind no client knows, then "ok"
//	/stop REASON   no text, stopReason REASON (max_tokens, refusal, ...)
//	/error         a JSON-RPC error (-32603) instead of an answer
//	/auth          a JSON-RPC error -32000 "Authentication required"
//	/crash         exit with status 3 in the middle of the turn (saying so on stderr)
//	/pid           the text "pid N"
//	/cwd           the text "cwd DIR" (session/new's cwd)
//
// Test switches, as flags:
//
//	--protocol N      answer initialize with protocol version N
//	--auth-required   answer session/new with error -32000, and say on stderr
//	                  that no API key is set
//	--silent          never answer initialize
//	--perm-word WORD  a prompt that is WORD alone is taken as /perm (a keypad
//	                  cannot type "/")
//	--perm-log FILE   append each permission answer received to FILE, one
//	                  line each: "OUTCOME OPTION_ID" (a test counts them)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

type agentState struct {
	protocol     int
	authRequired bool
	silent       bool

	wmu sync.Mutex
	out *bufio.Writer

	mu      sync.Mutex
	nextID  int
	pending map[string]chan message // our requests, by id
	cancel  context.CancelFunc      // the turn in progress
	cwd     string
	session string

	permWord string
	permLog  string
}

func main() {
	a := &agentState{out: bufio.NewWriter(os.Stdout), pending: map[string]chan message{}}
	flag.IntVar(&a.protocol, "protocol", 1, "protocol version to answer initialize with")
	flag.BoolVar(&a.authRequired, "auth-required", false, "refuse session/new: authentication required")
	flag.BoolVar(&a.silent, "silent", false, "never answer initialize")
	flag.StringVar(&a.permWord, "perm-word", "", "a prompt that is this word alone is taken as /perm")
	flag.StringVar(&a.permLog, "perm-log", "", "append each permission answer received to this file")
	flag.Parse()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			fmt.Fprintln(os.Stderr, "acpagent: bad line:", err)
			continue
		}
		a.handle(m)
	}
}

func (a *agentState) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.out.Write(b)
	a.out.WriteByte('\n')
	a.out.Flush()
}

func (a *agentState) respond(id json.RawMessage, result any) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *agentState) fail(id json.RawMessage, code int, msg string, data any) {
	a.send(message{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: code, Message: msg, Data: data}})
}

func (a *agentState) update(u map[string]any) {
	a.send(map[string]any{"jsonrpc": "2.0", "method": "session/update",
		"params": map[string]any{"sessionId": a.session, "update": u}})
}

func (a *agentState) chunk(text string) {
	a.update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": text}})
}

// request sends a request to the client and waits for its answer.
func (a *agentState) request(ctx context.Context, method string, params any) (message, error) {
	a.mu.Lock()
	a.nextID++
	id := strconv.Itoa(a.nextID)
	ch := make(chan message, 1)
	a.pending[id] = ch
	a.mu.Unlock()
	a.send(map[string]any{"jsonrpc": "2.0", "id": a.nextID, "method": method, "params": params})
	// The client must answer even after a cancel (with "cancelled"), so
	// the answer is awaited whatever ctx does.
	m := <-ch
	return m, nil
}

func (a *agentState) handle(m message) {
	switch {
	case m.Method == "" && m.ID != nil: // an answer to our request
		a.mu.Lock()
		ch := a.pending[string(m.ID)]
		delete(a.pending, string(m.ID))
		a.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case m.Method == "initialize":
		if a.silent {
			return
		}
		a.respond(m.ID, map[string]any{"protocolVersion": a.protocol,
			"agentCapabilities": map[string]any{"loadSession": false, "promptCapabilities": map[string]any{}},
			"authMethods":       []any{map[string]any{"id": "api-key", "name": "API key"}},
			"agentInfo":         map[string]any{"name": "acpagent", "version": "1"}})
	case m.Method == "session/new":
		if a.authRequired {
			fmt.Fprintln(os.Stderr, "acpagent: no API key set (ACPAGENT_API_KEY)")
			a.fail(m.ID, -32000, "Authentication required", map[string]any{"details": "set ACPAGENT_API_KEY"})
			return
		}
		var p struct {
			Cwd string `json:"cwd"`
		}
		_ = json.Unmarshal(m.Params, &p)
		a.mu.Lock()
		a.cwd = p.Cwd
		a.session = fmt.Sprintf("sess_%d", os.Getpid())
		a.mu.Unlock()
		a.respond(m.ID, map[string]any{"sessionId": a.session})
	case m.Method == "session/cancel":
		a.mu.Lock()
		if a.cancel != nil {
			a.cancel()
		}
		a.mu.Unlock()
	case m.Method == "session/prompt":
		var p struct {
			Prompt []struct {
				Type string `json:"type"`
				Text string `json:"text"`
				URI  string `json:"uri"`
			} `json:"prompt"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			a.fail(m.ID, -32602, "Invalid params", err.Error())
			return
		}
		var parts []string
		for _, b := range p.Prompt {
			switch b.Type {
			case "text":
				parts = append(parts, b.Text)
			case "resource_link":
				parts = append(parts, "["+b.URI+"]")
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		a.mu.Lock()
		a.cancel = cancel
		a.mu.Unlock()
		go func() {
			defer cancel()
			a.turn(ctx, m.ID, strings.Join(parts, " "))
		}()
	case m.ID != nil:
		a.fail(m.ID, -32601, "Method not found", map[string]any{"method": m.Method})
	}
}

func (a *agentState) end(id json.RawMessage, reason string) {
	a.respond(id, map[string]any{"stopReason": reason})
}

func (a *agentState) turn(ctx context.Context, id json.RawMessage, text string) {
	cmd, arg, _ := strings.Cut(strings.TrimSpace(text), " ")
	arg = strings.TrimSpace(arg)
	if a.permWord != "" && cmd == a.permWord && arg == "" {
		cmd = "/perm"
	}
	switch cmd {
	case "/tool":
		a.update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": arg, "kind": "read", "status": "pending"})
		a.update(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "in_progress"})
		a.update(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed",
			"content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": "file text"}}}})
		a.chunk("used " + arg)
	case "/plan":
		a.update(map[string]any{"sessionUpdate": "plan", "entries": []any{
			map[string]any{"content": "read the code", "priority": "high", "status": "completed"},
			map[string]any{"content": "write the fix", "priority": "high", "status": "in_progress"},
			map[string]any{"content": "run the tests", "priority": "medium", "status": "pending"},
		}})
		a.chunk("planned")
	case "/perm":
		a.update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call_2", "title": "Edit config.json", "kind": "edit", "status": "pending"})
		resp, _ := a.request(ctx, "session/request_permission", map[string]any{
			"sessionId": a.session,
			"toolCall":  map[string]any{"toolCallId": "call_2", "title": "Edit config.json"},
			"options": []any{
				map[string]any{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
				map[string]any{"optionId": "no", "name": "Skip", "kind": "reject_once"},
			},
		})
		var out struct {
			Outcome struct {
				Outcome  string `json:"outcome"`
				OptionID string `json:"optionId"`
			} `json:"outcome"`
		}
		if resp.Error != nil || json.Unmarshal(resp.Result, &out) != nil {
			a.fail(id, -32603, "Internal error", "bad permission answer")
			return
		}
		if a.permLog != "" {
			if f, err := os.OpenFile(a.permLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintf(f, "%s %s\n", out.Outcome.Outcome, out.Outcome.OptionID)
				f.Close()
			}
		}
		switch {
		case out.Outcome.Outcome == "cancelled":
			a.end(id, "cancelled")
			return
		case out.Outcome.OptionID == "yes":
			a.chunk("allowed")
		default:
			a.chunk("rejected")
		}
	case "/slow":
		ms, _ := strconv.Atoi(arg)
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			a.chunk("slept")
		case <-ctx.Done():
			a.end(id, "cancelled")
			return
		}
	case "/stream":
		ms, words, _ := strings.Cut(arg, " ")
		gap, _ := strconv.Atoi(ms)
		t := time.NewTicker(time.Duration(max(gap, 1)) * time.Millisecond)
		defer t.Stop()
		for i, w := range strings.Fields(words) {
			if i > 0 {
				select {
				case <-t.C:
				case <-ctx.Done():
					a.end(id, "cancelled")
					return
				}
				w = " " + w
			}
			a.chunk(w)
		}
	case "/gate":
		path, words, _ := strings.Cut(arg, " ")
		first, rest, _ := strings.Cut(strings.TrimSpace(words), " ")
		a.chunk(first)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if _, err := os.Stat(path); err == nil {
				break
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				a.end(id, "cancelled")
				return
			}
		}
		for _, w := range strings.Fields(rest) {
			a.chunk(" " + w)
		}
	case "/chunks":
		n, _ := strconv.Atoi(arg)
		for range n {
			a.chunk("x")
		}
	case "/thought":
		a.update(map[string]any{"sessionUpdate": "agent_thought_chunk", "content": map[string]any{"type": "text", "text": "hmm"}})
		a.chunk("thought")
	case "/unknown":
		a.update(map[string]any{"sessionUpdate": "mystery_kind", "whatever": 1})
		a.chunk("ok")
	case "/stop":
		a.end(id, arg)
		return
	case "/error":
		a.fail(id, -32603, "Internal error", map[string]any{"details": "something broke"})
		return
	case "/auth":
		a.fail(id, -32000, "Authentication required", map[string]any{"details": "the API key expired"})
		return
	case "/crash":
		a.chunk("about to crash")
		fmt.Fprintln(os.Stderr, "acpagent: crashing as asked")
		os.Exit(3)
	case "/pid":
		a.chunk(fmt.Sprintf("pid %d", os.Getpid()))
	case "/cwd":
		a.mu.Lock()
		cwd := a.cwd
		a.mu.Unlock()
		a.chunk("cwd " + cwd)
	default:
		a.chunk("You said: ")
		a.chunk(text)
	}
	if ctx.Err() != nil {
		a.end(id, "cancelled")
		return
	}
	a.end(id, "end_turn")
}
