// Command nuumagent is an example agent speaking the Nuum wire protocol
// (spec/nuum-wire-protocol.md): NDJSON on stdin and stdout, one process
// serving many turns. termlink's tests run it through
// termlink/server/agent/nuum; it is also a template for a real agent.
//
// It says system/init on start, answers each user message with the
// assistant text "You said: TEXT" and a success result, accepts messages
// arriving mid-turn (system/queued; those that arrive while /slow sleeps
// are injected, system/injected, and answered in the same turn; others are
// answered as the next turn), stops a turn on {"type":"control",
// "action":"interrupt"} (system/interrupted, then a cancelled result) and
// answers heartbeats with system/heartbeat_ack. It exits when stdin ends.
//
// Messages that are commands:
//
//	/slow N               sleep N ms inside the turn (interruptible), then answer
//	/tool NAME            tool_use, its tool_result, then the text "Used NAME"
//	/tool-both NAME       as /tool, with the tool result in both shapes
//	/steps A|B|...[|=R]   one assistant frame per step, then a success result
//	                      whose "result" is R (default: the last step)
//	/steps-noresult A|B   as /steps, the result without a "result" text
//	/result SUBTYPE [T]   end the turn with a result of SUBTYPE, "result" T, no text
//	/iserror T            a "success" result with is_error true and "result" T
//	/syserror T           system/error saying T, then a bare "error" result
//	/interrupted          system/interrupted and no result
//	/pid                  answer "pid N" (the agent's process id)
//	/exit N               exit with status N in the middle of the turn
//	/stream N MS          N partial text deltas "w1", " w2", .. " wN", MS ms
//	                      apart (interruptible), then the assistant text
//	                      "w1 w2 .. wN" and a success result with it
//	/stream-wait PATH     a partial delta "before ", then wait until the file
//	                      PATH exists (interruptible), then "after"; the
//	                      assistant text and result "before after"
//
// Partial deltas are Claude Code's --include-partial-messages frames:
// {"type":"stream_event","event":{"type":"content_block_delta","index":0,
// "delta":{"type":"text_delta","text":"..."}},...} between message_start,
// content_block_start and content_block_stop events, followed by the
// whole assistant message as usual.
//
// Test switches, as flags or in the environment:
//
//	--no-init           NUUMAGENT_NO_INIT=1           never send system/init
//	--crash-after N     NUUMAGENT_CRASH_AFTER=N       exit with status 3 (saying so on stderr) instead
//	                                                  of starting turn N+1
//	--no-heartbeat-ack  NUUMAGENT_NO_HEARTBEAT_ACK=1  ignore heartbeats
//	--garbage           NUUMAGENT_GARBAGE=1           write junk lines and an over-long (1.5 MiB)
//	                                                  line before init and in every turn
//	--no-cancel-result  NUUMAGENT_NO_CANCEL_RESULT=1  on interrupt send system/interrupted only
//	--claude            NUUMAGENT_CLAUDE=1            speak only Claude Code's stream-json subset: no
//	                                                  turn_accepted, queued, injected, interrupted or
//	                                                  heartbeat_ack; tool results as user messages;
//	                                                  interrupts ignored; messages arriving mid-turn
//	                                                  answered as turns of their own
//	--session-id ID     NUUMAGENT_SESSION_ID=ID       the session_id (default nuum_test_PID)
//
// Streaming switches (for other messages than the commands above):
//
//	--stream            NUUMAGENT_STREAM=1            stream the answer "You said: TEXT" word
//	                                                  by word as partial deltas before its
//	                                                  assistant frame
//	--stream-delay D    NUUMAGENT_STREAM_DELAY=D      the time between two words (Go duration;
//	                                                  default 50ms)
//	--stream-chunks N   NUUMAGENT_STREAM_CHUNKS=N     answer with N one-character partial
//	                                                  deltas ("a".."z" over and over) as fast as
//	                                                  it writes, then the assistant frame and
//	                                                  result with their concatenation (the
//	                                                  coalescing benchmark); wins over --stream
//	--stream-chunk-delay D  NUUMAGENT_STREAM_CHUNK_DELAY=D
//	                                                  the time between two of those chunks
//	                                                  (default 0: as fast as it writes)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

type options struct {
	noInit         bool
	crashAfter     int // -1: never
	noHeartbeatAck bool
	garbage        bool
	noCancelResult bool
	claude         bool
	sessionID      string
	stream         bool
	streamDelay    time.Duration
	streamChunks   int
	chunkDelay     time.Duration
}

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	envBool := func(k string) bool { b, _ := strconv.ParseBool(getenv(k)); return b }
	crash := -1
	if v := getenv("NUUMAGENT_CRASH_AFTER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return options{}, fmt.Errorf("NUUMAGENT_CRASH_AFTER: %v", err)
		}
		crash = n
	}
	delay := 50 * time.Millisecond
	if v := getenv("NUUMAGENT_STREAM_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return options{}, fmt.Errorf("NUUMAGENT_STREAM_DELAY=%q: want a duration such as 50ms", v)
		}
		delay = d
	}
	chunks := 0
	if v := getenv("NUUMAGENT_STREAM_CHUNKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return options{}, fmt.Errorf("NUUMAGENT_STREAM_CHUNKS=%q: want a count", v)
		}
		chunks = n
	}
	var chunkDelay time.Duration
	if v := getenv("NUUMAGENT_STREAM_CHUNK_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return options{}, fmt.Errorf("NUUMAGENT_STREAM_CHUNK_DELAY=%q: want a duration such as 1ms", v)
		}
		chunkDelay = d
	}
	sid := getenv("NUUMAGENT_SESSION_ID")
	if sid == "" {
		sid = fmt.Sprintf("nuum_test_%d", os.Getpid())
	}
	var o options
	fs := flag.NewFlagSet("nuumagent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.noInit, "no-init", envBool("NUUMAGENT_NO_INIT"), "never send system/init")
	fs.IntVar(&o.crashAfter, "crash-after", crash, "exit with status 3 instead of starting turn N+1 (-1: never)")
	fs.BoolVar(&o.noHeartbeatAck, "no-heartbeat-ack", envBool("NUUMAGENT_NO_HEARTBEAT_ACK"), "ignore heartbeats")
	fs.BoolVar(&o.garbage, "garbage", envBool("NUUMAGENT_GARBAGE"), "write junk and over-long lines")
	fs.BoolVar(&o.noCancelResult, "no-cancel-result", envBool("NUUMAGENT_NO_CANCEL_RESULT"), "on interrupt send system/interrupted only")
	fs.BoolVar(&o.claude, "claude", envBool("NUUMAGENT_CLAUDE"), "speak Claude Code's stream-json subset only")
	fs.StringVar(&o.sessionID, "session-id", sid, "session_id to report")
	fs.BoolVar(&o.stream, "stream", envBool("NUUMAGENT_STREAM"), "stream the answer word by word as partial deltas")
	fs.DurationVar(&o.streamDelay, "stream-delay", delay, "time between two streamed words")
	fs.IntVar(&o.streamChunks, "stream-chunks", chunks, "answer with N one-character partial deltas, fast")
	fs.DurationVar(&o.chunkDelay, "stream-chunk-delay", chunkDelay, "time between two --stream-chunks chunks")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if o.streamDelay < 0 || o.streamChunks < 0 || o.chunkDelay < 0 {
		return options{}, fmt.Errorf("--stream-delay, --stream-chunks and --stream-chunk-delay must not be negative")
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

// run is the agent; it returns the exit status.
func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	opt, err := parseOptions(args, getenv, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "nuumagent:", err)
		return 2
	}
	a := &nuumAgent{
		opt:      opt,
		out:      bufio.NewWriter(stdout),
		stderr:   stderr,
		turnDone: make(chan turnEnd),
		exitCh:   make(chan int),
		quit:     make(chan struct{}),
	}
	defer close(a.quit)
	return a.serve(stdin)
}

type nuumAgent struct {
	opt    options
	stderr io.Writer

	outMu sync.Mutex
	out   *bufio.Writer

	turns    int           // turns finished (main loop only)
	nextID   int           // tool_use ids (turn goroutines, one at a time)
	turnDone chan turnEnd  // a turn ended
	exitCh   chan int      // /exit
	quit     chan struct{} // closed when serve returns
}

// turnState is the running turn, as the main loop sees it.
type turnState struct {
	cancel context.CancelFunc
	inject chan string
}

// inbound is one stdin line.
type inbound struct {
	Type    string `json:"type"`
	Action  string `json:"action"`
	Message struct {
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

func (a *nuumAgent) serve(stdin io.Reader) int {
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() {
			line := append([]byte(nil), sc.Bytes()...)
			select {
			case lines <- line:
			case <-a.quit:
				return
			}
		}
		if err := sc.Err(); err != nil {
			fmt.Fprintln(a.stderr, "nuumagent: reading stdin:", err)
		}
	}()

	if a.opt.garbage {
		a.writeGarbage()
	}
	if !a.opt.noInit {
		a.emit(map[string]any{"type": "system", "subtype": "init", "session_id": a.opt.sessionID,
			"version": "0.1.0-test", "tools": []string{"read", "write", "bash"}})
	}

	var (
		cur   *turnState
		queue []string
	)
	start := func(text string) (exit int, ok bool) {
		if a.opt.crashAfter >= 0 && a.turns >= a.opt.crashAfter {
			fmt.Fprintf(a.stderr, "nuumagent: crashing after %d turns as asked\n", a.turns)
			return 3, false
		}
		ctx, cancel := context.WithCancel(context.Background())
		cur = &turnState{cancel: cancel, inject: make(chan string, 64)}
		go a.turn(ctx, cur, text)
		return 0, true
	}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if cur != nil {
					cur.cancel()
					a.finish(<-a.turnDone, nil)
				}
				return 0
			}
			var in inbound
			if err := json.Unmarshal(line, &in); err != nil {
				fmt.Fprintf(a.stderr, "nuumagent: bad input line: %v\n", err)
				a.emit(map[string]any{"type": "system", "subtype": "error", "message": "bad input: " + err.Error()})
				continue
			}
			switch in.Type {
			case "control":
				switch in.Action {
				case "heartbeat":
					if !a.opt.noHeartbeatAck && !a.opt.claude {
						a.emit(map[string]any{"type": "system", "subtype": "heartbeat_ack"})
					}
				case "interrupt":
					if cur != nil && !a.opt.claude {
						cur.cancel()
					}
				case "status":
					a.emit(map[string]any{"type": "system", "subtype": "status_response", "running": cur != nil, "session_id": a.opt.sessionID})
				}
			case "user":
				text := contentText(in.Message.Content)
				switch {
				case cur == nil:
					if code, ok := start(text); !ok {
						return code
					}
				case a.opt.claude:
					queue = append(queue, text)
				default:
					a.emit(map[string]any{"type": "system", "subtype": "queued", "position": len(cur.inject) + len(queue) + 1})
					select {
					case cur.inject <- text:
					default:
						queue = append(queue, text)
					}
				}
			default:
				a.emit(map[string]any{"type": "system", "subtype": "error", "message": fmt.Sprintf("unknown input type %q", in.Type)})
			}
		case end := <-a.turnDone:
			cur.cancel()
			var left []string
			for len(cur.inject) > 0 {
				left = append(left, <-cur.inject)
			}
			left = a.finish(end, left)
			cur = nil
			a.turns++
			queue = append(left, queue...)
			if len(queue) == 0 {
				continue
			}
			text := queue[0]
			queue = queue[1:]
			if code, ok := start(text); !ok {
				return code
			}
			if !a.opt.claude {
				for len(queue) > 0 && len(cur.inject) < cap(cur.inject) {
					cur.inject <- queue[0]
					queue = queue[1:]
				}
			}
		case code := <-a.exitCh:
			fmt.Fprintf(a.stderr, "nuumagent: exiting with status %d as asked\n", code)
			return code
		}
	}
}

// turnEnd is how a turn ends. The main loop writes its last frames, so
// that a message read before them is part of the turn and one read after
// them starts the next.
type turnEnd struct {
	replies []string // answer with these texts (and absorb waiting messages) ...
	frames  []any    // ... or write these frames
	started time.Time
}

// turn works on one message on its own goroutine.
func (a *nuumAgent) turn(ctx context.Context, ts *turnState, text string) {
	end := turnEnd{started: time.Now()}
	defer func() {
		select {
		case a.turnDone <- end:
		case <-a.quit:
		}
	}()
	if !a.opt.claude {
		a.emit(map[string]any{"type": "system", "subtype": "turn_accepted", "session_id": a.opt.sessionID,
			"timestamp": time.Now().UTC().Format("2006-01-02T15:04:05.000Z")})
	}
	if a.opt.garbage {
		a.writeGarbage()
	}
	cmd, arg, _ := strings.Cut(strings.TrimSpace(text), " ")
	arg = strings.TrimSpace(arg)
	end.replies = []string{"You said: " + text}
	switch cmd {
	case "/slow":
		ms, _ := strconv.Atoi(arg)
		timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer timer.Stop()
		var inject chan string
		if !a.opt.claude {
			inject = ts.inject
		}
		for {
			select {
			case <-timer.C:
				return
			case msg := <-inject:
				a.absorb(&end, msg)
			case <-ctx.Done():
				end.replies, end.frames = nil, a.interruptedFrames()
				return
			}
		}
	case "/tool", "/tool-both":
		a.nextID++
		id := fmt.Sprintf("call_%d", a.nextID)
		a.emit(a.assistant(map[string]any{"type": "tool_use", "id": id, "name": arg, "input": map[string]any{"filePath": "/tmp/test.txt"}}))
		res := map[string]any{"type": "tool_result", "tool_use_id": id, "content": "result of " + arg, "is_error": false}
		if !a.opt.claude {
			a.emit(map[string]any{"type": "system", "subtype": "tool_result", "tool_result": res})
		}
		if a.opt.claude || cmd == "/tool-both" {
			a.emit(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{res}}, "session_id": a.opt.sessionID})
		}
		end.replies = []string{"Used " + arg}
	case "/steps", "/steps-noresult":
		steps := strings.Split(arg, "|")
		result := steps[len(steps)-1]
		if r, ok := strings.CutPrefix(result, "="); ok && len(steps) > 1 {
			steps, result = steps[:len(steps)-1], r
		}
		for _, step := range steps {
			a.emit(a.assistant(map[string]any{"type": "text", "text": step}))
		}
		if cmd == "/steps-noresult" {
			result = ""
		}
		end.replies, end.frames = nil, []any{a.result("success", false, result, end.started)}
	case "/result":
		subtype, detail, _ := strings.Cut(arg, " ")
		end.replies, end.frames = nil, []any{a.result(subtype, subtype != "success" && subtype != "cancelled", detail, end.started)}
	case "/iserror":
		end.replies, end.frames = nil, []any{a.result("success", true, arg, end.started)}
	case "/syserror":
		end.replies = nil
		end.frames = []any{map[string]any{"type": "system", "subtype": "error", "message": arg}, a.result("error", true, "", end.started)}
	case "/interrupted":
		end.replies = nil
		end.frames = []any{map[string]any{"type": "system", "subtype": "interrupted", "session_id": a.opt.sessionID}}
	case "/pid":
		end.replies = []string{fmt.Sprintf("pid %d", os.Getpid())}
	case "/exit":
		code, _ := strconv.Atoi(arg)
		select {
		case a.exitCh <- code:
		case <-a.quit:
		}
		<-a.quit
	case "/stream":
		f := strings.Fields(arg)
		n, ms := 0, 0
		if len(f) > 0 {
			n, _ = strconv.Atoi(f[0])
		}
		if len(f) > 1 {
			ms, _ = strconv.Atoi(f[1])
		}
		pieces := make([]string, 0, n)
		for i := 1; i <= n; i++ {
			if i == 1 {
				pieces = append(pieces, "w1")
			} else {
				pieces = append(pieces, fmt.Sprintf(" w%d", i))
			}
		}
		end.replies = []string{strings.Join(pieces, "")}
		if !a.streamPieces(ctx, pieces, time.Duration(ms)*time.Millisecond) {
			end.replies, end.frames = nil, a.interruptedFrames()
		}
	case "/stream-wait":
		end.replies = []string{"before after"}
		a.partialStart()
		a.partialDelta("before ")
		for {
			if _, err := os.Stat(arg); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				a.partialStop()
				end.replies, end.frames = nil, a.interruptedFrames()
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		a.partialDelta("after")
		a.partialStop()
	default:
		switch {
		case a.opt.streamChunks > 0:
			pieces := make([]string, a.opt.streamChunks)
			for i := range pieces {
				pieces[i] = string(rune('a' + i%26))
			}
			end.replies = []string{strings.Join(pieces, "")}
			if !a.streamPieces(ctx, pieces, a.opt.chunkDelay) {
				end.replies, end.frames = nil, a.interruptedFrames()
			}
		case a.opt.stream:
			if !a.streamPieces(ctx, strings.SplitAfter(end.replies[0], " "), a.opt.streamDelay) {
				end.replies, end.frames = nil, a.interruptedFrames()
			}
		}
	}
}

// streamPieces writes pieces as the partial text deltas of one text block,
// delay apart; false when the turn was interrupted meanwhile.
func (a *nuumAgent) streamPieces(ctx context.Context, pieces []string, delay time.Duration) bool {
	a.partialStart()
	defer a.partialStop()
	for i, p := range pieces {
		if i > 0 && delay > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(delay):
			}
		} else if ctx.Err() != nil {
			return false
		}
		a.partialDelta(p)
	}
	return true
}

// Partial message frames (Claude Code's --include-partial-messages): the
// start of a message and of its text block 0, a text delta, the block's
// end.
func (a *nuumAgent) partialStart() {
	a.partial(map[string]any{"type": "message_start", "message": map[string]any{"role": "assistant", "content": []any{}, "model": "nuumagent-test"}})
	a.partial(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
}

func (a *nuumAgent) partialDelta(text string) {
	a.partial(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text}})
}

func (a *nuumAgent) partialStop() {
	a.partial(map[string]any{"type": "content_block_stop", "index": 0})
}

func (a *nuumAgent) partial(event map[string]any) {
	a.nextID++
	a.emit(map[string]any{"type": "stream_event", "event": event, "session_id": a.opt.sessionID,
		"parent_tool_use_id": nil, "uuid": fmt.Sprintf("ev-%d-%d", os.Getpid(), a.nextID)})
}

// absorb makes msg part of the turn's answer.
func (a *nuumAgent) absorb(end *turnEnd, msg string) {
	a.emit(map[string]any{"type": "system", "subtype": "injected", "message_count": 1, "session_id": a.opt.sessionID})
	end.replies = append(end.replies, "You said: "+msg)
}

// finish writes a turn's last frames; left are messages queued for it
// that it did not take. It returns the messages to answer in the next turn.
func (a *nuumAgent) finish(end turnEnd, left []string) []string {
	if end.replies == nil {
		for _, f := range end.frames {
			a.emit(f)
		}
		return left
	}
	if !a.opt.claude {
		for _, msg := range left {
			a.absorb(&end, msg)
		}
		left = nil
	}
	blocks := make([]any, 0, len(end.replies))
	for _, r := range end.replies {
		blocks = append(blocks, map[string]any{"type": "text", "text": r})
	}
	a.emit(a.assistant(blocks...))
	a.emit(a.result("success", false, end.replies[len(end.replies)-1], end.started))
	return left
}

// interruptedFrames end an interrupted turn.
func (a *nuumAgent) interruptedFrames() []any {
	if a.opt.claude {
		return []any{a.result("cancelled", false, "", time.Now())}
	}
	frames := []any{map[string]any{"type": "system", "subtype": "interrupted", "session_id": a.opt.sessionID}}
	if !a.opt.noCancelResult {
		frames = append(frames, a.result("cancelled", false, "", time.Now()))
	}
	return frames
}

func (a *nuumAgent) assistant(blocks ...any) map[string]any {
	return map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": blocks,
		"model": "nuumagent-test"}, "session_id": a.opt.sessionID}
}

func (a *nuumAgent) result(subtype string, isError bool, text string, started time.Time) map[string]any {
	f := map[string]any{"type": "result", "subtype": subtype, "duration_ms": time.Since(started).Milliseconds(),
		"is_error": isError, "num_turns": 1, "session_id": a.opt.sessionID,
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1}}
	if text != "" {
		f["result"] = text
	}
	return f
}

// writeGarbage writes lines a client must skip: not JSON, JSON without a
// type, and a well-formed assistant frame longer than 1 MiB whose text
// ("OVERLONG...") must never reach a reply.
func (a *nuumAgent) writeGarbage() {
	long := `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"OVERLONG` +
		strings.Repeat("x", 3<<19) + `"}]}}`
	a.outMu.Lock()
	defer a.outMu.Unlock()
	for _, l := range []string{"this is not JSON", `{"type":`, `{"no_type":true}`, `[1,2,3]`, `{"type":42}`, "\x00\xff\xfe", long} {
		a.out.WriteString(l)
		a.out.WriteByte('\n')
	}
	a.out.Flush()
}

// emit writes one frame.
func (a *nuumAgent) emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // frames are built from plain values
	}
	a.outMu.Lock()
	defer a.outMu.Unlock()
	a.out.Write(b)
	a.out.WriteByte('\n')
	a.out.Flush()
}

// contentText is a message's content: a string, or its text blocks joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}
