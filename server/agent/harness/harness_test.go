package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/config"

	"termlink/internal/testwait"
)

var targets = []string{TargetTmux, TargetPTY}

// The tests that run tasks are not parallel among themselves (their
// subtests are): each reads the screen after the waits its agent asks
// for, and more of them at once made a loaded machine miss those waits.

// The agent writes and runs a hello-world script, then confirms twice.
func TestHelloWorld(t *testing.T) {
	for _, target := range targets {
		for _, format := range []Format{FormatJSON, FormatXML} {
			t.Run(target+"/"+format.String(), func(t *testing.T) {
				t.Parallel()
				testHelloWorld(t, target, format)
			})
		}
	}
}

func testHelloWorld(t *testing.T, target string, format Format) {
	reply := jsonReply
	if format == FormatXML {
		reply = xmlReply
	}
	s := newScript(t)
	r := newRunner(t, target, s.cmd, Options{}, nil)
	s.reply(1, reply("The directory is empty.", false,
		cmd{"printf 'echo hello, world\\n' > hello.sh\n", 0.1},
		cmd{"sh hello.sh\n", 0.3}))
	s.reply(2, reply("hello.sh prints hello, world.", true))
	s.reply(3, reply("Confirmed: hello.sh prints hello, world.", true))

	const task = "Write a shell script hello.sh that prints hello, world, and run it."
	res, progress := runTask(t, r, "terminal:dev:peer-1", task)
	if res.FinishReason != "stop" {
		t.Fatalf("result = %+v", res)
	}
	if !strings.HasPrefix(res.Text, "Confirmed: hello.sh prints hello, world.\n\n") || !strings.Contains(res.Text, "Task complete (confirmed at step 3)") {
		t.Errorf("result text = %q", res.Text)
	}
	if n := s.steps(); n != 3 {
		t.Errorf("agent ran %d times, want 3", n)
	}
	req1 := s.request(1)
	if want := "Task Description:\n" + task + "\n\nCurrent terminal state:\n"; !strings.HasPrefix(req1, want) {
		t.Errorf("request 1 = %q, want prefix %q", req1, want)
	}
	if strings.Contains(req1, "Are you sure") || strings.Contains(req1, "WARNINGS") {
		t.Errorf("request 1 has more than task and screen: %q", req1)
	}
	if screen := screenOf(s.request(2)); countLines(screen, "hello, world") != 1 {
		t.Errorf("request 2 screen has no output line \"hello, world\":\n%s", screen)
	}
	req3 := s.request(3)
	if !strings.HasSuffix(req3, "\n\n"+ConfirmQuestion(format)+"\n") {
		t.Errorf("request 3 does not end with the %v confirmation question:\n%s", format, req3)
	}
	if strings.Contains(s.request(2), "Are you sure") {
		t.Error("request 2 asks for confirmation")
	}
	dir := WorkDir(r.opt.Workspace, "terminal:dev:peer-1")
	if b, err := os.ReadFile(filepath.Join(dir, "hello.sh")); err != nil || string(b) != "echo hello, world\n" {
		t.Errorf("hello.sh in the work directory = %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.dir, "session.txt")); string(b) != "terminal:dev:peer-1" {
		t.Errorf("TERMLINK_SESSION = %q", b)
	}
	p := progress.all()
	if len(p) == 0 || p[0] != "step 1: thinking" || !contains(p, "step 1: printf 'echo hello, world\\n' > hello.sh; sh hello.sh") ||
		!contains(p, "step 3: says the task is complete") {
		t.Errorf("progress = %q", p)
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// Malformed responses are refused with their errors (nothing typed);
// warnings are passed on with the next state.
func TestMalformedJSON(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, nil)
	s.reply(1, `{"analysis": "a", "commands": [{"keystrokes": "touch bad1\n", "duration": 0.1}]}`)
	s.reply(2, "Sure! Here it is:\n"+`{"analysis": "warned", "plan": "p", "commands": [{"keystrokes": "touch good\n", "why": "x"}]}`)
	s.reply(3, `{"analysis": "a", "plan": "p", "commands": "touch bad3"}`)
	s.reply(4, `{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "touch bad4\n", "duration": 0.1}, {"duration": 1}]}`)
	s.reply(5, "I am not sure what to do.")
	s.reply(6, `{"analysis": "done", "plan": "p", "commands": [], "task_complete": true`)
	s.reply(7, jsonReply("done, confirmed", true))

	res, _ := runTask(t, r, "s1", "touch good")
	if res.FinishReason != "stop" || !strings.Contains(res.Text, "confirmed at step 7") {
		t.Fatalf("result = %+v", res)
	}
	dir := WorkDir(r.opt.Workspace, "s1")
	for _, f := range []string{"bad1", "bad3", "bad4"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s exists: a refused response was typed", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "good")); err != nil {
		t.Errorf("the warned response did not run: %v", err)
	}
	tests := []struct {
		step int
		want []string
	}{
		{2, []string{"Previous response had parsing errors:\nERROR: Missing required fields: plan\n", "Nothing was typed. Please fix these issues and provide a proper JSON response.\n\nCurrent terminal state:\n"}},
		{3, []string{"Previous response had warnings:\nWARNINGS: - Extra text detected before JSON object", "Command 1: Unknown fields: why\n", "Command 1: Missing duration field, using default 1.0"}},
		{4, []string{"ERROR: Field 'commands' must be an array"}},
		{5, []string{"ERROR: Command 2 missing required 'keystrokes' field"}},
		{6, []string{"ERROR: No JSON object or <response> block found"}},
		{7, []string{"WARNINGS: - AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing brace - please fix this in future responses", ConfirmQuestion(FormatJSON)}},
	}
	for _, tt := range tests {
		req := s.request(tt.step)
		for _, w := range tt.want {
			if !strings.Contains(req, w) {
				t.Errorf("request %d has no %q:\n%s", tt.step, w, req)
			}
		}
		if !strings.HasPrefix(req, "Task Description:\ntouch good\n\n") {
			t.Errorf("request %d does not start with the task: %q", tt.step, req)
		}
	}
}

func TestMalformedXML(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, nil)
	s.reply(1, "<response><analysis>a</analysis><plan>p</plan><commands><command><duration>1</duration></command></commands></response>")
	s.reply(2, "Here:\n<response><analysis>a</analysis><plan>p</plan><commands><command><keystrokes>touch good\n</keystrokes></command></commands>")
	s.reply(3, "<response><analysis>a</analysis><commands></commands></response>")
	s.reply(4, xmlReply("done", true))
	s.reply(5, xmlReply("confirmed", true))
	res, _ := runTask(t, r, "s1", "touch good")
	if res.FinishReason != "stop" || !strings.HasPrefix(res.Text, "confirmed\n\n") {
		t.Fatalf("result = %+v", res)
	}
	for step, want := range map[int][]string{
		2: {"ERROR: Command 1 missing required <keystrokes> element", "provide a proper response."},
		3: {"WARNINGS: - AUTO-CORRECTED: Missing </response> tag", "Extra text detected before <response> tag", "Command 1: Missing duration field"},
		4: {"WARNINGS: - Missing <plan> section"},
		5: {ConfirmQuestion(FormatXML)},
	} {
		for _, w := range want {
			if !strings.Contains(s.request(step), w) {
				t.Errorf("request %d has no %q:\n%s", step, w, s.request(step))
			}
		}
	}
	if _, err := os.Stat(filepath.Join(WorkDir(r.opt.Workspace, "s1"), "good")); err != nil {
		t.Error(err)
	}
}

// Anything but a second consecutive task_complete resets the confirmation.
func TestConfirmationResets(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, nil)
	s.reply(1, jsonReply("done?", true))
	s.reply(2, jsonReply("not yet", false, cmd{"echo more\n", 0.1}))
	s.reply(3, jsonReply("done now", true))
	s.reply(4, jsonReply("sure", true))
	res, _ := runTask(t, r, "s1", "x")
	if res.FinishReason != "stop" || s.steps() != 4 {
		t.Fatalf("result = %+v after %d steps", res, s.steps())
	}
	for step, asked := range map[int]bool{1: false, 2: true, 3: false, 4: true} {
		if got := strings.Contains(s.request(step), "Are you sure"); got != asked {
			t.Errorf("request %d asks to confirm: %v, want %v", step, got, asked)
		}
	}
}

// C-c interrupts a running command; Up recalls the last one.
func TestSpecialKeys(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			s := newScript(t)
			r := newRunner(t, target, s.cmd, Options{}, nil)
			s.reply(1, jsonReply("start", false, cmd{"sleep 100\n", 0.3}))
			s.reply(2, jsonReply("interrupt", false,
				cmd{"C-c", 0.3},
				cmd{"echo after-interrupt\n", 0.2},
				cmd{"echo up-test\n", 0.2},
				cmd{"Up", 0.2},
				cmd{"Enter", 0.3},
				cmd{"echo abcX", 0.1},
				cmd{"BSpace", 0.1},
				cmd{"Left", 0.1},
				cmd{"Right", 0.1},
				cmd{"Y\n", 0.6}))
			s.reply(3, jsonReply("done", true))
			s.reply(4, jsonReply("done", true))
			res, _ := runTask(t, r, "keys", "press keys")
			if res.FinishReason != "stop" {
				t.Fatalf("result = %+v", res)
			}
			// Interrupted: the echo typed after C-c ran (its output is a
			// line of its own), which it could not while sleep 100 held
			// the shell.
			screen := screenOf(s.request(3))
			if !strings.Contains(screen, "^C") || countLines(screen, "after-interrupt") != 1 {
				t.Errorf("no interrupt seen:\n%s", screen)
			}
			if n := countLines(screen, "up-test"); n != 2 {
				t.Errorf("up-test printed %d times, want 2 (Up, Enter):\n%s", n, screen)
			}
			if countLines(screen, "abcY") != 1 {
				t.Errorf("BSpace, Left, Right did not edit the line:\n%s", screen)
			}
		})
	}
}

// Literal text reaches the shell unchanged, whatever tmux's parser makes
// of it (a trailing ';' or "\;", a long text sent in chunks).
func TestLiteralText(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			s := newScript(t)
			r := newRunner(t, target, s.cmd, Options{}, nil)
			long := ": " + strings.Repeat("x", tmuxChunk-3) + "; echo chunk-ok\n"
			s.reply(1, jsonReply("type", false,
				cmd{"echo one;", 0.1}, cmd{"Enter", 0.2},
				cmd{"find . -maxdepth 0 -exec echo found {} \\;", 0.1}, cmd{"Enter", 0.2},
				cmd{";", 0.1}, cmd{"C-c", 0.1},
				cmd{"echo '#{pane_pid}' -- -l ~x\n", 0.2}))
			s.reply(2, jsonReply("long", false, cmd{long, 0.5}))
			s.reply(0, jsonReply("done", true))
			if res, _ := runTask(t, r, "lit", "type"); res.FinishReason != "stop" {
				t.Fatalf("result %+v", res)
			}
			screen := screenOf(s.request(2))
			for _, line := range []string{"one", "found .", "#{pane_pid} -- -l ~x"} {
				if countLines(screen, line) != 1 {
					t.Errorf("no line %q:\n%s", line, screen)
				}
			}
			if screen := screenOf(s.request(3)); countLines(screen, "chunk-ok") != 1 {
				t.Errorf("long text lost its chunk-ending ';':\n%s", screen)
			}
		})
	}
}

// A session's next task reuses its terminal; an idle terminal is torn
// down; another session gets its own.
func TestSessionReuseAndIdle(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			s := newScript(t)
			// Long enough that session a's terminal outlives task 3 on a
			// busy machine (stress run 25, load 39-71: at 1.5 s it was
			// torn down before the count below).
			r := newRunner(t, target, s.cmd, Options{IdleTimeout: 5 * time.Second}, nil)
			s.reply(1, jsonReply("set", false, cmd{"export MARK=kept-$((6*7))\n", 0.1}, cmd{"echo $MARK\n", 0.2}))
			s.reply(0, jsonReply("done", true))
			if res, _ := runTask(t, r, "a", "task 1"); res.FinishReason != "stop" {
				t.Fatalf("task 1: %+v", res)
			}
			s.reset()
			s.reply(1, jsonReply("again", false, cmd{"echo again-$MARK\n", 0.2}))
			s.reply(0, jsonReply("done", true))
			if res, _ := runTask(t, r, "a", "task 2"); res.FinishReason != "stop" {
				t.Fatalf("task 2: %+v", res)
			}
			if screen := screenOf(s.request(1)); countLines(screen, "kept-42") != 1 {
				t.Errorf("task 2 starts on a new screen:\n%s", screen)
			}
			if screen := screenOf(s.request(2)); countLines(screen, "again-kept-42") != 1 {
				t.Errorf("task 2 is not in the same shell:\n%s", screen)
			}
			s.reset()
			s.reply(1, jsonReply("b", false, cmd{"echo other-$MARK.\n", 0.2}))
			s.reply(0, jsonReply("done", true))
			if res, _ := runTask(t, r, "b", "task 3"); res.FinishReason != "stop" {
				t.Fatalf("task 3: %+v", res)
			}
			if screen := screenOf(s.request(2)); countLines(screen, "other-.") != 1 {
				t.Errorf("session b shares session a's shell:\n%s", screen)
			}
			r.mu.Lock()
			n := len(r.slots)
			var term terminal
			if sl := r.slots["a"]; sl != nil {
				term = sl.term
			}
			r.mu.Unlock()
			if n != 2 || term == nil {
				t.Fatalf("%d terminals, want 2", n)
			}
			testwait.Until(t, "idle teardown", func() bool {
				r.mu.Lock()
				defer r.mu.Unlock()
				return len(r.slots) == 0
			})
			// The reaper forgets the slot, then closes its terminal.
			testwait.Until(t, "the idle terminal to be closed", func() bool { return !term.Alive() })
			// A new task starts a new terminal.
			s.reset()
			s.reply(1, jsonReply("c", false, cmd{"echo new-$MARK.\n", 0.2}))
			s.reply(0, jsonReply("done", true))
			if res, _ := runTask(t, r, "a", "task 4"); res.FinishReason != "stop" {
				t.Fatalf("task 4: %+v", res)
			}
			if screen := screenOf(s.request(2)); countLines(screen, "new-.") != 1 {
				t.Errorf("after teardown the shell was not new:\n%s", screen)
			}
		})
	}
}

// The agent typing exit ends the shell; the next step gets a new one.
func TestShellExitRestarts(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			s := newScript(t)
			r := newRunner(t, target, s.cmd, Options{}, nil)
			s.reply(1, jsonReply("bye", false, cmd{"exit\n", 0.5}))
			s.reply(2, jsonReply("hi", false, cmd{"echo back-again\n", 0.3}))
			s.reply(0, jsonReply("done", true))
			if res, _ := runTask(t, r, "x", "exit"); res.FinishReason != "stop" {
				t.Fatalf("result %+v", res)
			}
			if req := s.request(2); !strings.Contains(req, "Note: the shell exited; a new shell was started") {
				t.Errorf("request 2 does not say the shell restarted:\n%s", req)
			}
			if countLines(screenOf(s.request(3)), "back-again") != 1 {
				t.Errorf("new shell did not run the command:\n%s", s.request(3))
			}
		})
	}
}

func TestCancel(t *testing.T) {
	t.Run("while a command runs", func(t *testing.T) {
		s := newScript(t)
		r := newRunner(t, TargetPTY, s.cmd, Options{}, nil)
		// The command's wait is the longest there is (60 s): a run that
		// honours the cancel ends at once, one that waits it out cannot
		// end within runGuard.
		s.reply(1, jsonReply("waiting", false, cmd{"sleep 100\n", MaxDuration.Seconds()}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := runWithin(t, r, ctx, agent.Request{SessionKey: "c", Text: "wait", Workspace: r.opt.Workspace}, func(p string) {
			if strings.HasPrefix(p, "step 1: sleep") {
				cancel()
			}
		})
		if res.FinishReason != "cancelled" || res.Text != "waiting\n\nCancelled at step 1." {
			t.Errorf("result = %+v", res)
		}
		if n := s.steps(); n != 1 {
			t.Errorf("agent ran %d times after the cancel, want 1", n)
		}
	})
	t.Run("while the agent thinks", func(t *testing.T) {
		dir := t.TempDir()
		pidFile := filepath.Join(dir, "pid")
		command := fmt.Sprintf("sleep 100 & echo $! > %s; wait", shellQuote(pidFile))
		r := newRunner(t, TargetPTY, command, Options{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan agent.Result)
		go func() {
			done <- r.Run(ctx, agent.Request{SessionKey: "c", Text: "think", Workspace: r.opt.Workspace}, nil)
		}()
		pid := readPID(t, pidFile)
		cancel()
		select {
		case res := <-done:
			if res.FinishReason != "cancelled" {
				t.Errorf("result = %+v", res)
			}
		case <-time.After(testwait.Deadline):
			t.Fatal("Run did not return after cancel")
		}
		testwait.Until(t, "the agent's child to be killed", func() bool { return processGone(pid) })
	})
	t.Run("before it starts", func(t *testing.T) {
		r := newRunner(t, TargetPTY, "true", Options{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := r.Run(ctx, agent.Request{SessionKey: "c", Text: "x", Workspace: r.opt.Workspace}, nil)
		if res.FinishReason != "cancelled" {
			t.Errorf("result = %+v", res)
		}
	})
}

func TestMaxSteps(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, func(c *config.HarnessAgent) { c.MaxSteps = 3 })
	s.reply(0, jsonReply("still working", false))
	res, _ := runTask(t, r, "m", "never ends")
	if res.FinishReason != "stop" || res.Text != "still working\n\nStopped after 3 steps (the step limit) before the agent confirmed the task complete." {
		t.Errorf("result = %+v", res)
	}
	if n := s.steps(); n != 3 {
		t.Errorf("agent ran %d times, want 3", n)
	}
}

func TestMaxDuration(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, func(c *config.HarnessAgent) { c.MaxDuration = 1 })
	// The command's wait is the longest there is (60 s): the limit must
	// cut it short, not be checked once it is over (which runGuard
	// tells apart).
	s.reply(0, jsonReply("polling", false, cmd{"", MaxDuration.Seconds()}))
	res := runWithin(t, r, context.Background(), agent.Request{SessionKey: "m", Text: "slow", Workspace: r.opt.Workspace}, nil)
	if res.FinishReason != "timeout" || !strings.Contains(res.Text, "took longer than 1s (the time limit)") {
		t.Errorf("result = %+v", res)
	}
	if n := s.steps(); n != 1 {
		t.Errorf("agent ran %d times, want 1", n)
	}
}

// A step over stepTimeout kills the agent and what it started.
func TestStepTimeoutKillsGrandchild(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	inner := filepath.Join(dir, "inner.sh")
	if err := os.WriteFile(inner, fmt.Appendf(nil, "sleep 300 &\necho $! > %s\nwait\n", shellQuote(pidFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, TargetPTY, "sh "+shellQuote(inner)+"; echo unreachable", Options{}, func(c *config.HarnessAgent) { c.StepTimeout = 1 })
	// The agent would answer after 300 s: without the step timeout
	// runTask's context (60 s) ends the run "cancelled", not "error".
	res, _ := runTask(t, r, "t", "hang")
	if res.FinishReason != "error" || !strings.Contains(res.Text, "Agent failed at step 1: the agent did not answer within 1s (the step timeout)") {
		t.Errorf("result = %+v", res)
	}
	pid := readPID(t, pidFile)
	testwait.Until(t, "the grandchild to be killed", func() bool { return processGone(pid) })
}

func TestAgentFailures(t *testing.T) {
	tests := []struct {
		name, command string
		opt           Options
		want          string
	}{
		{"exit status", "echo boom >&2; exit 3", Options{}, "Agent failed at step 1: the agent exited with status 3: boom"},
		{"killed", "kill -9 $$", Options{}, "the agent was killed (signal: killed)"},
		{"too much output", "head -c 5000 /dev/zero", Options{MaxResponseBytes: 1000}, "the agent printed more than 1000 bytes"},
		{"not found", "/nonexistent/agent", Options{}, "exited with status 127"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRunner(t, TargetPTY, tt.command, tt.opt, nil)
			res, _ := runTask(t, r, "f", "fail")
			if res.FinishReason != "error" || !strings.Contains(res.Text, tt.want) {
				t.Errorf("result = %+v, want text with %q", res, tt.want)
			}
		})
	}
}

// The screen the agent sees is capped, head and tail kept.
func TestObservationCap(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, func(c *config.HarnessAgent) { c.ObservationBytes = 100 })
	s.reply(1, jsonReply("count", false, cmd{"seq 1000 1100\n", 0.5}))
	s.reply(0, jsonReply("done", true))
	if res, _ := runTask(t, r, "o", "count"); res.FinishReason != "stop" {
		t.Fatalf("result %+v", res)
	}
	screen := screenOf(s.request(2))
	head, tail, ok := strings.Cut(screen, "\n[... output limited to 100 bytes; ")
	if !ok {
		t.Fatalf("no cut marker:\n%s", screen)
	}
	_, tail, _ = strings.Cut(tail, " interior bytes omitted ...]\n")
	if len(head) != 50 || len(tail) > 51 || !strings.HasPrefix(head, "10") || !strings.HasSuffix(strings.TrimSpace(tail), "#") && !strings.HasSuffix(strings.TrimSpace(tail), "$") {
		t.Errorf("head %d bytes, tail %d bytes:\n%s", len(head), len(tail), screen)
	}
}

func TestCapObservation(t *testing.T) {
	t.Parallel()
	if got := capObservation("short", 100); got != "short" {
		t.Errorf("short = %q", got)
	}
	got := capObservation(strings.Repeat("a", 50)+strings.Repeat("b", 50), 20)
	want := "aaaaaaaaaa\n[... output limited to 20 bytes; 80 interior bytes omitted ...]\nbbbbbbbbbb"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// Cuts stay on rune boundaries.
	got = capObservation(strings.Repeat("é", 30), 11)
	if !strings.HasPrefix(got, "éé\n") || !strings.HasSuffix(got, "\néé") || !strings.Contains(got, "; 52 interior bytes") {
		t.Errorf("utf-8 cut = %q", got)
	}
}

func TestCloseStopsRuns(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, nil)
	s.reply(0, jsonReply("waiting", false, cmd{"", 30}))
	started := make(chan struct{})
	var once sync.Once
	done := make(chan agent.Result)
	go func() {
		done <- r.Run(context.Background(), agent.Request{SessionKey: "z", Text: "x", Workspace: r.opt.Workspace}, func(p string) {
			if strings.HasPrefix(p, "step 1: wait") {
				once.Do(func() { close(started) })
			}
		})
	}()
	<-started
	r.mu.Lock()
	term := r.slots["z"].term.(*ptyTerm)
	r.mu.Unlock()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.FinishReason != "cancelled" || !strings.Contains(res.Text, "shutting down") {
		t.Errorf("result = %+v", res)
	}
	if !processGone(term.cmd.Process.Pid) {
		t.Error("shell still running after Close")
	}
	if res := r.Run(context.Background(), agent.Request{SessionKey: "z", Text: "x"}, nil); res.FinishReason != "cancelled" {
		t.Errorf("run after close = %+v", res)
	}
}

// Close leaves no goroutine behind. Not parallel: it counts the
// process's goroutines.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	// Package procs forks every agent from one goroutine that lives as
	// long as the process, started by the first agent: it runs before
	// the count (the tests that ran first started it before they were
	// parallel).
	warm := exec.Command("true")
	if err := (*procs.Registry)(nil).Start(warm); err != nil {
		t.Fatal(err)
	}
	_ = warm.Wait()
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			if target == TargetTmux {
				requireTmux(t)
			}
			before := runtime.NumGoroutine()
			s := newScript(t)
			r, err := New("leak", config.HarnessAgent{Command: s.cmd, Target: target}, Options{Workspace: t.TempDir(), Logger: quiet, IdleTimeout: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			s.reply(1, jsonReply("a", false, cmd{"sleep 100 &\n", 0.1}))
			s.reply(0, jsonReply("done", true))
			for _, key := range []string{"one", "two"} {
				if res, _ := runTask(t, r, key, "x"); res.FinishReason != "stop" {
					t.Fatalf("result %+v", res)
				}
				s.reset()
				s.reply(0, jsonReply("done", true))
			}
			var sids []int
			r.mu.Lock()
			for _, sl := range r.slots {
				switch term := sl.term.(type) {
				case *ptyTerm:
					sids = append(sids, term.cmd.Process.Pid)
				case *tmuxTerm:
					sids = append(sids, term.panePID)
				}
			}
			r.mu.Unlock()
			if len(sids) != 2 {
				t.Fatalf("%d terminals, want 2", len(sids))
			}
			jobs := 0
			for _, sid := range sids {
				jobs += len(procs.SessionMembers(sid))
			}
			if jobs == 0 {
				t.Fatal("the background job is in no terminal's session")
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			testwait.UntilOK(t, "goroutines to stop", func() error {
				if n := runtime.NumGoroutine(); n > before {
					buf := make([]byte, 1<<20)
					return fmt.Errorf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
				}
				return nil
			})
			for _, sid := range sids {
				testwait.Until(t, "the terminal's processes to end", func() bool {
					for _, pid := range append(procs.SessionMembers(sid), sid) {
						if !processGone(pid) {
							return false
						}
					}
					return true
				})
			}
		})
	}
}

func TestParallelSessions(t *testing.T) {
	s := newScript(t)
	r := newRunner(t, TargetPTY, s.cmd, Options{}, nil)
	s.reply(1, jsonReply("go", false, cmd{"echo in-$PWD\n", 0.2}))
	s.reply(0, jsonReply("done", true))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, _ := runTask(t, r, fmt.Sprintf("p%d", i), "parallel")
			if res.FinishReason != "stop" {
				t.Errorf("session %d: %+v", i, res)
			}
		}()
	}
	wg.Wait()
}

func TestTmuxFallsBackToPTY(t *testing.T) {
	t.Parallel()
	r := newRunner(t, TargetPTY, "true", Options{}, nil)
	if r.Target() != TargetPTY {
		t.Errorf("target %q", r.Target())
	}
	r2, err := New("x", config.HarnessAgent{Command: "true", Target: "tmux"}, Options{TmuxPath: "/nonexistent/tmux", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if r2.Target() != TargetPTY {
		t.Errorf("without tmux the target is %q, want pty", r2.Target())
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []config.HarnessAgent{
		{Command: ""},
		{Command: "x", Target: "ssh"},
		{Command: "x", Target: "serial:/dev/ttyS0"},
	} {
		if r, err := New("bad", cfg, Options{Logger: quiet}); err == nil {
			r.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	r, err := New("ok", config.HarnessAgent{Command: "x", Target: "serial:/dev/ttyUSB0@115200"}, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Target() != TargetSerial || r.cfg.MaxSteps != config.DefaultHarnessMaxSteps {
		t.Errorf("target %q, cfg %+v", r.Target(), r.cfg)
	}
	res := r.Run(context.Background(), agent.Request{SessionKey: "s", Text: "x", Workspace: t.TempDir()}, nil)
	if res.FinishReason != "error" || !strings.Contains(res.Text, "/dev/ttyUSB0") {
		t.Errorf("missing port: %+v", res)
	}
	if res := r.Run(context.Background(), agent.Request{SessionKey: "s", Text: "  "}, nil); res.FinishReason != "error" {
		t.Errorf("empty message: %+v", res)
	}
}

func TestWorkDir(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"terminal:dev:peer-1": "terminal:dev:peer-1",
		"":                    "default",
		"../../etc":           "%2E.%2F..%2Fetc",
		"a b/c":               "a%20b%2Fc",
	}
	for key, want := range tests {
		if got := WorkDir("/ws", key); got != "/ws/harness/"+want {
			t.Errorf("WorkDir(%q) = %q, want %q", key, got, "/ws/harness/"+want)
		}
	}
	long := WorkDir("/ws", strings.Repeat("x", 300))
	if len(filepath.Base(long)) > 200 {
		t.Errorf("long key: %q", long)
	}
}
