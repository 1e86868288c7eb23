//go:build unix

package terminal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"termlink/server/agent"

	"termlink/internal/testwait"
)

// chunks records what a run streams (Request.Stream), and whether any
// chunk came after Run returned.
type chunks struct {
	mu       sync.Mutex
	list     []string
	returned bool // Run returned
	late     int  // chunks after that
	got      chan struct{}
}

func newChunks() *chunks { return &chunks{got: make(chan struct{}, 1)} }

func (c *chunks) write(s string) {
	c.mu.Lock()
	c.list = append(c.list, s)
	if c.returned {
		c.late++
	}
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
}

func (c *chunks) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.list, "")
}

func (c *chunks) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.list)
}

// waitText waits (generously) until the streamed text is want.
func (c *chunks) waitText(t *testing.T, want string) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("the streamed text %q", want), func() error {
		if got := c.text(); got != want {
			return fmt.Errorf("streamed %q", got)
		}
		return nil
	})
}

// waitPrefix waits until the streamed text begins with want (a stream
// that goes on may be past it at the next look).
func (c *chunks) waitPrefix(t *testing.T, want string) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("the streamed text to begin with %q", want), func() error {
		if got := c.text(); !strings.HasPrefix(got, want) {
			return fmt.Errorf("streamed %q", got)
		}
		return nil
	})
}

// streamRun starts req with Stream recording into c; the result comes
// on the channel.
func (f *fixture) streamRun(ctx context.Context, req agent.Request, c *chunks) <-chan agent.Result {
	req.Stream = c.write
	done := make(chan agent.Result, 1)
	go func() {
		res := f.r.Run(ctx, req, nil)
		c.mu.Lock()
		c.returned = true
		c.mu.Unlock()
		done <- res
	}()
	return done
}

func (f *fixture) await(done <-chan agent.Result) agent.Result {
	f.t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(runTimeout):
		f.t.Fatal("Run did not return")
		return agent.Result{}
	}
}

// A rich agent's delta frames reach Request.Stream as they are written,
// while the agent still runs: the agent waits for a file the test creates
// only once it has the first chunk. Without a message frame the deltas
// are the reply, and it equals what was streamed.
func TestStreamDeltasWhileTheAgentRuns(t *testing.T) {
	t.Parallel()
	for _, mode := range startModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, rich(goAgentCommand(t, mode, "")))
			gate := filepath.Join(t.TempDir(), "go-on")
			c := newChunks()
			done := f.streamRun(context.Background(), f.req("/stream-wait "+gate), c)
			c.waitText(t, "before") // its trailing space waits for more text
			select {
			case res := <-done:
				t.Fatalf("Run returned %+v before the agent went on", res)
			default:
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			res := f.await(done)
			wantResult(t, res, finishStop)
			if res.Text != "before after" || c.text() != res.Text {
				t.Fatalf("reply %q, streamed %q; want both %q", res.Text, c.text(), "before after")
			}
			if c.late != 0 {
				t.Fatalf("%d chunks after Run returned", c.late)
			}
		})
	}
}

// Many deltas arrive in order, and an agent that ends with a message
// frame of the whole text is not shown it twice: the reply is the
// message, equal to the deltas' concatenation.
func TestStreamDeltasInOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rich(goAgentCommand(t, "direct", "")))
	c := newChunks()
	res := f.await(f.streamRun(context.Background(), f.req("/stream 50 2"), c))
	var want []string
	for i := 1; i <= 50; i++ {
		want = append(want, "w"+strconv.Itoa(i))
	}
	wantText := strings.Join(want, " ")
	wantResult(t, res, finishStop)
	if res.Text != wantText || c.text() != wantText {
		t.Fatalf("reply %q, streamed %q; want %q", res.Text, c.text(), wantText)
	}
	if c.count() != 50 {
		t.Fatalf("%d chunks, want one per delta frame (50)", c.count())
	}
}

// With Request.Stream nil nothing is streamed and the reply is what it
// would be: the deltas (no message frame) or the message frame.
func TestStreamNilReplyUnchanged(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rich(goAgentCommand(t, "direct", "")))
	for text, want := range map[string]string{
		"/stream-only 3 0": "w1 w2 w3",
		"/stream 3 0":      "w1 w2 w3",
		"hello":            "You said: hello",
	} {
		res := f.text(text)
		wantResult(t, res, finishStop)
		if res.Text != want {
			t.Errorf("%s: reply %q, want %q", text, res.Text, want)
		}
	}
}

// Cancelling a run mid-stream kills the agent: the reply is cancelled,
// what was streamed is the start of it, and nothing is streamed after
// Run returned.
func TestStreamCancelledMidStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rich(goAgentCommand(t, "direct", "")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newChunks()
	done := f.streamRun(ctx, f.req("/stream-only 100000 20"), c)
	c.waitPrefix(t, "w1 w2")
	cancel()
	res := f.await(done)
	wantResult(t, res, finishCancelled, "cancelled")
	if got := c.text(); !strings.HasPrefix(res.Text, got) || !strings.HasPrefix(got, "w1 w2") {
		t.Fatalf("streamed %q is not the start of the reply %q", got, res.Text)
	}
	n := c.count()
	time.Sleep(100 * time.Millisecond) // the agent wrote every 20 ms: a chunk still due would come by now
	if c.count() != n || c.late != 0 {
		t.Fatalf("chunks after Run returned: %d, then %d", n, c.count())
	}
}

// A delta frame without a string text is dropped with a clear log line
// and an event; the run goes on.
func TestStreamBadDeltaFrame(t *testing.T) {
	t.Parallel()
	f := newFixture(t, rich(goAgentCommand(t, "direct", "")))
	var mu sync.Mutex
	var events []string
	req := f.req("/bad-delta")
	req.Event = func(name, detail string) {
		mu.Lock()
		events = append(events, name+": "+detail)
		mu.Unlock()
	}
	c := newChunks()
	res := f.await(f.streamRun(context.Background(), req, c))
	wantResult(t, res, finishStop)
	if res.Text != "still here" || c.text() != "still" {
		t.Fatalf("reply %q, streamed %q; want %q and %q", res.Text, c.text(), "still here", "still")
	}
	f.logs.wantOrder(t, `WARN agent frame dropped: delta frame without "text"`,
		`WARN agent frame dropped: delta frame whose "text" is not a string: 5`)
	mu.Lock()
	defer mu.Unlock()
	want := []string{`agent_bad_frame: delta frame without "text"`, `agent_bad_frame: delta frame whose "text" is not a string: 5`}
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events %q, want %q", events, want)
	}
}

// What is streamed stays the start of the reply the deltas make, however
// the agent spreads white space over them: leading newlines are dropped
// and trailing white space waits for the text after it.
func TestStreamWhiteSpaceStaysAPrefix(t *testing.T) {
	t.Parallel()
	body := `printf '%s\n' '{"type":"delta","text":"\n\n"}' '{"type":"delta","text":"\nHi "}' '{"type":"delta","text":" "}' \
'{"type":"delta","text":"there\n"}' '{"type":"delta","text":"\n"}' '{"type":"log","text":"x"}'
echo plain line`
	for _, mode := range startModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, rich(agentCommand(t, mode, body)))
			c := newChunks()
			res := f.await(f.streamRun(context.Background(), f.req("x"), c))
			wantResult(t, res, finishStop)
			if res.Text != "Hi  there\n\nplain line" {
				t.Fatalf("reply %q", res.Text)
			}
			if c.text() != "Hi  there" || c.count() != 2 {
				t.Fatalf("streamed %q in %d chunks, want %q in 2", c.text(), c.count(), "Hi  there")
			}
		})
	}
}

// FuzzStreamText: whatever the chunks, what streamText passes on is a
// prefix of the deltas' text as the reply shows it.
func FuzzStreamText(f *testing.F) {
	for _, s := range []string{"\n\nHi |there\n", "a|b| |\t|c", "\r\n| \n|x", "", "|||", "x \n|\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // a delta frame's text is decoded JSON: valid UTF-8
		}
		var out strings.Builder
		w := streamText{out: func(c string) {
			if c == "" {
				t.Fatal("empty chunk passed on")
			}
			out.WriteString(c)
		}}
		var all strings.Builder
		for _, c := range strings.Split(s, "|") {
			all.WriteString(c)
			w.write(c)
			if !strings.HasPrefix(cleanText(all.String()), out.String()) {
				t.Fatalf("streamed %q, not a prefix of %q", out.String(), cleanText(all.String()))
			}
		}
	})
}
