// Command echoagent is a Terminal Protocol v1 micro-agent in Go
// (docs/agents.md), rich mode: it reads the JSON
// envelope from stdin and answers with JSONL frames on stdout,
//
//	{"type":"message","text":"You said: <text>"}
//
// With -progress it first sends {"type":"progress","text":"thinking"}. With
// -plain it prints "You said: <text>" as plain text instead of frames (for
// protocol "plain").
//
// Texts starting with a command do something else, for tests:
//
//	/sleep SECONDS     progress "sleeping", sleep, then "slept SECONDS s"
//	/error             error frame "requested error" (code ECHO_ERROR), exit 1
//	/exit N            "exiting with N" on stderr, exit N, no frames
//	/stderr N          N bytes on stderr, then "wrote N bytes to stderr"
//	/media PATH...     a message frame with these files attached
//	/bigline [N]       a message frame whose text is N bytes (default 2 MiB)
//	/flood N           N bytes of plain text lines on stdout, then a message
//	/grandchild        start a child process that sleeps 1000 s holding
//	                   stdout, send its pid in a progress frame
//	                   ("grandchild PID"), then sleep 1000 s too
//	/orphan            start such a child, reply "left grandchild PID" and
//	                   exit at once
//	/env NAME          reply with the value of environment variable NAME
//	/envelope          reply with the envelope line as received
//	/log LEVEL TEXT    a log frame, then "logged"
//	/plain TEXT        TEXT as a plain (non-JSON) line, then a message frame
//	/binary            a plain line with bytes that are not UTF-8
//	/multi N           N message frames "part 1" .. "part N"
//	/stream N MS       N delta frames "w1", " w2", .. " wN", MS ms apart,
//	                   then a message frame with their concatenation
//	/stream-only N MS  the same deltas and no message frame (the deltas are
//	                   the reply)
//	/stream-wait PATH [THEN]
//	                   a delta "before ", then wait (up to 60 s) until the
//	                   file PATH exists, then a delta "after", then (with
//	                   THEN) wait until THEN exists too; no message
//	/bad-delta         {"type":"delta"}, {"type":"delta","text":5}, then a
//	                   delta "still " and a message "still here"
//
// Streaming (delta frames, termlink's extension of rich mode), as flags
// or in the environment; the flag wins:
//
//	-stream             ECHOAGENT_STREAM=1         answer "You said: <text>" word
//	                                               by word as delta frames, then
//	                                               a message frame with the whole
//	                                               text (commands are unchanged)
//	-stream-delay D     ECHOAGENT_STREAM_DELAY=D   the time between two words
//	                                               (Go duration; default 50ms)
//	-stream-chunks N    ECHOAGENT_STREAM_CHUNKS=N  answer with N one-character
//	                                               delta frames ("a".."z" over
//	                                               and over), then a message
//	                                               frame with their concatenation
//	                                               (the coalescing benchmark);
//	                                               wins over -stream
//	-stream-chunk-delay D  ECHOAGENT_STREAM_CHUNK_DELAY=D
//	                                               the time between two of those
//	                                               chunks (default 0: as fast as
//	                                               it can write)
//
// Configure it as
//
//	"echo-go": {"terminal": {"enabled": true, "command": "/path/to/echoagent", "protocol": "rich"}}
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// envelope is the part of the stdin envelope echoagent uses.
type envelope struct {
	Text        string   `json:"text"`
	Media       []string `json:"media"`
	UserDataDir string   `json:"user_data_dir"`
}

// options are the command line's switches.
type options struct {
	progress, plain bool
	stream          bool
	streamDelay     time.Duration
	streamChunks    int
	chunkDelay      time.Duration
}

func main() {
	var o options
	hold := flag.Float64("hold", 0, "internal: sleep this many seconds and exit (the grandchild)")
	flag.BoolVar(&o.progress, "progress", false, "send a progress frame before answering")
	flag.BoolVar(&o.plain, "plain", false, "answer in plain text instead of JSONL frames")
	envBool, _ := strconv.ParseBool(os.Getenv("ECHOAGENT_STREAM"))
	flag.BoolVar(&o.stream, "stream", envBool, "stream the answer word by word as delta frames (env ECHOAGENT_STREAM)")
	delay := 50 * time.Millisecond
	fromEnv("ECHOAGENT_STREAM_DELAY", "a duration such as 50ms", func(v string) (err error) {
		if delay, err = time.ParseDuration(v); err == nil && delay < 0 {
			err = errors.New("negative")
		}
		return err
	})
	flag.DurationVar(&o.streamDelay, "stream-delay", delay, "time between two streamed words (env ECHOAGENT_STREAM_DELAY)")
	chunks := 0
	fromEnv("ECHOAGENT_STREAM_CHUNKS", "a count", func(v string) (err error) {
		if chunks, err = strconv.Atoi(v); err == nil && chunks < 0 {
			err = errors.New("negative")
		}
		return err
	})
	flag.IntVar(&o.streamChunks, "stream-chunks", chunks, "answer with N one-character delta frames, fast (env ECHOAGENT_STREAM_CHUNKS)")
	var chunkDelay time.Duration
	fromEnv("ECHOAGENT_STREAM_CHUNK_DELAY", "a duration such as 1ms", func(v string) (err error) {
		if chunkDelay, err = time.ParseDuration(v); err == nil && chunkDelay < 0 {
			err = errors.New("negative")
		}
		return err
	})
	flag.DurationVar(&o.chunkDelay, "stream-chunk-delay", chunkDelay, "time between two -stream-chunks chunks (env ECHOAGENT_STREAM_CHUNK_DELAY)")
	flag.Parse()
	if *hold > 0 {
		time.Sleep(time.Duration(*hold * float64(time.Second)))
		return
	}
	if o.streamDelay < 0 || o.streamChunks < 0 || o.chunkDelay < 0 {
		fmt.Fprintln(os.Stderr, "echoagent: -stream-delay, -stream-chunks and -stream-chunk-delay must not be negative")
		os.Exit(2)
	}
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, o))
}

// fromEnv passes the environment variable name, when set, to parse; a
// value it refuses ends the program.
func fromEnv(name, want string, parse func(string) error) {
	if v := os.Getenv(name); v != "" {
		if err := parse(v); err != nil {
			fmt.Fprintf(os.Stderr, "echoagent: %s=%q: want %s (%v)\n", name, v, want, err)
			os.Exit(2)
		}
	}
}

// out writes frames and lines to stdout, unbuffered, one write per line.
type out struct{ w io.Writer }

func (o out) frame(f map[string]any) {
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	o.line(b)
}

func (o out) line(b []byte) {
	_, _ = o.w.Write(append(b, '\n'))
}

func (o out) message(text string) { o.frame(map[string]any{"type": "message", "text": text}) }

func (o out) delta(text string) { o.frame(map[string]any{"type": "delta", "text": text}) }

// streamWords sends text as delta frames, one word (with the space
// before it) at a time, delay apart, then the message frame with text.
func (o out) streamWords(text string, delay time.Duration) {
	words := strings.SplitAfter(text, " ")
	for i, w := range words {
		if i > 0 && delay > 0 {
			time.Sleep(delay)
		}
		o.delta(w)
	}
	o.message(text)
}

// streamChunks sends n one-character delta frames, delay apart (0: as
// fast as it can), then the message frame with their concatenation.
func (o out) streamChunks(n int, delay time.Duration) {
	var all strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 && delay > 0 {
			time.Sleep(delay)
		}
		c := string(rune('a' + i%26))
		all.WriteString(c)
		o.delta(c)
	}
	o.message(all.String())
}

// streamN sends n delta frames "w1", " w2", ... ms milliseconds apart
// and returns their concatenation.
func (o out) streamN(arg string) string {
	f := strings.Fields(arg)
	n, ms := 0, 0
	if len(f) > 0 {
		n, _ = strconv.Atoi(f[0])
	}
	if len(f) > 1 {
		ms, _ = strconv.Atoi(f[1])
	}
	var all strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 && ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		c := fmt.Sprintf("w%d", i)
		if i > 1 {
			c = " " + c
		}
		all.WriteString(c)
		o.delta(c)
	}
	return all.String()
}

// run answers one envelope read from stdin and returns the exit code.
func run(stdin io.Reader, stdout, stderr io.Writer, opt options) int {
	raw, err := bufio.NewReaderSize(stdin, 1<<16).ReadBytes('\n')
	if err != nil && err != io.EOF {
		fmt.Fprintf(stderr, "echoagent: reading stdin: %v\n", err)
		return 2
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		fmt.Fprintf(stderr, "echoagent: bad envelope: %v\n", err)
		return 2
	}
	o := out{stdout}
	if opt.plain {
		o.line([]byte("You said: " + env.Text))
		return 0
	}
	if opt.progress {
		o.frame(map[string]any{"type": "progress", "text": "thinking"})
	}
	cmd, arg, _ := strings.Cut(strings.TrimSpace(env.Text), " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/sleep":
		secs, _ := strconv.ParseFloat(arg, 64)
		o.frame(map[string]any{"type": "progress", "text": "sleeping"})
		time.Sleep(time.Duration(secs * float64(time.Second)))
		o.message(fmt.Sprintf("slept %s s", arg))
	case "/error":
		o.frame(map[string]any{"type": "error", "text": "requested error", "code": "ECHO_ERROR"})
		return 1
	case "/exit":
		n, _ := strconv.Atoi(arg)
		fmt.Fprintf(stderr, "exiting with %d\n", n)
		return n
	case "/stderr":
		n, _ := strconv.Atoi(arg)
		writeFill(stderr, n, 'e')
		o.message(fmt.Sprintf("wrote %d bytes to stderr", n))
	case "/media":
		o.frame(map[string]any{"type": "message", "text": "here you go", "media": strings.Fields(arg)})
	case "/bigline":
		n := 2 << 20
		if arg != "" {
			n, _ = strconv.Atoi(arg)
		}
		o.message(strings.Repeat("x", n))
	case "/flood":
		n, _ := strconv.Atoi(arg)
		writeFill(stdout, n, 'o')
		o.message("flooded")
	case "/grandchild", "/orphan":
		pid, err := startGrandchild(stdout)
		if err != nil {
			fmt.Fprintf(stderr, "echoagent: %v\n", err)
			return 1
		}
		if cmd == "/orphan" {
			o.message(fmt.Sprintf("left grandchild %d", pid))
			return 0
		}
		o.frame(map[string]any{"type": "progress", "text": fmt.Sprintf("grandchild %d", pid)})
		time.Sleep(1000 * time.Second)
	case "/env":
		o.message(os.Getenv(arg))
	case "/envelope":
		o.message(strings.TrimRight(string(raw), "\n"))
	case "/log":
		level, text, _ := strings.Cut(arg, " ")
		o.frame(map[string]any{"type": "log", "level": level, "text": text})
		o.message("logged")
	case "/plain":
		o.line([]byte(arg))
		o.message("and a frame")
	case "/binary":
		o.line([]byte("bad \xff\xfe bytes"))
		o.message("binary sent")
	case "/multi":
		n, _ := strconv.Atoi(arg)
		for i := 1; i <= n; i++ {
			o.message(fmt.Sprintf("part %d", i))
		}
	case "/stream":
		o.message(o.streamN(arg))
	case "/stream-only":
		o.streamN(arg)
	case "/stream-wait":
		gate, then, _ := strings.Cut(arg, " ")
		o.delta("before ")
		waitFile(gate)
		o.delta("after")
		if then != "" {
			waitFile(strings.TrimSpace(then))
		}
	case "/bad-delta":
		o.line([]byte(`{"type":"delta"}`))
		o.line([]byte(`{"type":"delta","text":5}`))
		o.delta("still ")
		o.message("still here")
	default:
		switch {
		case opt.streamChunks > 0:
			o.streamChunks(opt.streamChunks, opt.chunkDelay)
		case opt.stream:
			o.streamWords("You said: "+env.Text, opt.streamDelay)
		default:
			o.message("You said: " + env.Text)
		}
	}
	return 0
}

// waitFile waits up to 60 s until the file path exists.
func waitFile(path string) {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}

// writeFill writes n bytes of c in lines of 64.
func writeFill(w io.Writer, n int, c byte) {
	line := []byte(strings.Repeat(string(c), 63) + "\n")
	buf := make([]byte, 0, 64<<10)
	for n > 0 {
		k := min(n, len(line))
		buf = append(buf, line[len(line)-k:]...)
		n -= k
		if len(buf) > 60<<10 || n == 0 {
			_, _ = w.Write(buf)
			buf = buf[:0]
		}
	}
}

// startGrandchild starts this program again with -hold 1000, its stdout
// being ours, and returns its pid.
func startGrandchild(stdout io.Writer) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	c := exec.Command(self, "-hold", "1000")
	c.Stdout = stdout
	if f, ok := stdout.(*os.File); ok {
		c.Stdout = f
	}
	if err := c.Start(); err != nil {
		return 0, err
	}
	return c.Process.Pid, nil
}
