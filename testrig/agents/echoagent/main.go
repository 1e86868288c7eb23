// Command echoagent is a Terminal Protocol v1 micro-agent in Go
// (shared/spec/terminal-protocol-v1.md), rich mode: it reads the JSON
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
//
// Configure it as
//
//	"echo-go": {"terminal": {"enabled": true, "command": "/path/to/echoagent", "protocol": "rich"}}
package main

import (
	"bufio"
	"encoding/json"
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

func main() {
	hold := flag.Float64("hold", 0, "internal: sleep this many seconds and exit (the grandchild)")
	progress := flag.Bool("progress", false, "send a progress frame before answering")
	plain := flag.Bool("plain", false, "answer in plain text instead of JSONL frames")
	flag.Parse()
	if *hold > 0 {
		time.Sleep(time.Duration(*hold * float64(time.Second)))
		return
	}
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, *progress, *plain))
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

// run answers one envelope read from stdin and returns the exit code.
func run(stdin io.Reader, stdout, stderr io.Writer, progress, plain bool) int {
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
	if plain {
		o.line([]byte("You said: " + env.Text))
		return 0
	}
	if progress {
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
	default:
		o.message("You said: " + env.Text)
	}
	return 0
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
