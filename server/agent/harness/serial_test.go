package harness

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.bug.st/serial"
	"termlink/testrig/needtool"

	"termlink/internal/testwait"
)

// socatPair starts socat with two linked PTYs and returns their paths.
func socatPair(t *testing.T) (a, b string) {
	t.Helper()
	needtool.Path(t, "socat", "a PTY pair for the serial target; apt-get install socat")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "socat", "-d", "-d", "pty,raw,echo=0", "pty,raw,echo=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	drained := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-drained
		_ = cmd.Wait()
	})
	paths := make(chan string, 2)
	re := regexp.MustCompile(`PTY is (/dev/\S+)`)
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				paths <- m[1]
			}
		}
	}()
	for i := range 2 {
		select {
		case p := <-paths:
			if i == 0 {
				a = p
			} else {
				b = p
			}
		case <-time.After(testwait.Deadline):
			t.Fatal("socat did not report its PTYs")
		}
	}
	return a, b
}

// board is a fake device console on a serial port: it echoes what is
// typed and answers a few commands like a tiny shell.
type board struct {
	port serial.Port
	done chan struct{}

	mu  sync.Mutex
	got []byte // every byte received

	line     []byte
	hist     string
	esc      int // 1 after ESC, 2 after ESC [
	sleeping bool
}

func startBoard(t *testing.T, path string) *board {
	t.Helper()
	port, err := serial.Open(path, &serial.Mode{BaudRate: 115200})
	if err != nil {
		t.Fatalf("board: %v", err)
	}
	b := &board{port: port, done: make(chan struct{})}
	go b.run()
	t.Cleanup(func() {
		port.Close()
		<-b.done
	})
	return b
}

func (b *board) received() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.got)
}

func (b *board) run() {
	defer close(b.done)
	buf := make([]byte, 256)
	for {
		n, err := b.port.Read(buf)
		if err != nil {
			return
		}
		b.mu.Lock()
		b.got = append(b.got, buf[:n]...)
		b.mu.Unlock()
		for _, c := range buf[:n] {
			b.key(c)
		}
	}
}

func (b *board) write(s string) { _, _ = b.port.Write([]byte(s)) }

func (b *board) key(c byte) {
	switch b.esc {
	case 1:
		b.esc = 0
		if c == '[' {
			b.esc = 2
		}
		return
	case 2:
		b.esc = 0
		if c == 'A' && !b.sleeping { // Up: recall the last command
			b.line = []byte(b.hist)
			b.write("\r\x1b[Kboard> " + b.hist)
		}
		return
	}
	if b.sleeping {
		if c == 0x03 {
			b.sleeping = false
			b.write("^C\r\ninterrupted\r\nboard> ")
		}
		return
	}
	switch {
	case c == 0x1b:
		b.esc = 1
	case c == 0x03:
		b.line = nil
		b.write("^C\r\nboard> ")
	case c == 0x7f || c == 0x08:
		if len(b.line) > 0 {
			b.line = b.line[:len(b.line)-1]
			b.write("\b \b")
		}
	case c == '\r':
		b.write("\r\n")
		cmd := string(b.line)
		b.line = nil
		b.exec(cmd)
	case c >= 0x20 && c < 0x7f:
		b.line = append(b.line, c)
		b.write(string(c))
	}
}

func (b *board) exec(cmd string) {
	if cmd != "" {
		b.hist = cmd
	}
	switch {
	case cmd == "":
	case cmd == "uname":
		b.write("TinyBoard 1.0\n") // a bare LF, as many boards print
	case strings.HasPrefix(cmd, "echo "):
		b.write(cmd[len("echo "):] + "\r\n")
	case cmd == "sleep":
		b.sleeping = true
		return
	default:
		b.write("sh: " + cmd + ": not found\r\n")
	}
	b.write("board> ")
}

func TestSerialTarget(t *testing.T) {
	harnessEnd, boardEnd := socatPair(t)
	b := startBoard(t, boardEnd)
	s := newScript(t)
	r := newRunner(t, "serial:"+harnessEnd+"@115200", s.cmd, Options{}, nil)
	if r.Target() != TargetSerial {
		t.Fatalf("target %q", r.Target())
	}
	s.reply(1, jsonReply("nothing yet", false, cmd{"Enter", 0.2}, cmd{"uname\n", 0.3}))
	s.reply(2, jsonReply("a board", false,
		cmd{"sleep\n", 0.2},
		cmd{"C-c", 0.2},
		cmd{"echo back\n", 0.2},
		cmd{"Up", 0.2},
		cmd{"Enter", 0.3},
		cmd{"echo abcX", 0.1},
		cmd{"BSpace", 0.1},
		cmd{"Y\n", 0.6}))
	s.reply(3, jsonReply("done", true))
	s.reply(4, jsonReply("the board answers", true))
	res, _ := runTask(t, r, "dev-1", "find out what board this is")
	if res.FinishReason != "stop" || !strings.HasPrefix(res.Text, "the board answers\n\n") {
		t.Fatalf("result = %+v", res)
	}
	screen2 := screenOf(s.request(2))
	if !strings.Contains(screen2, "board> uname\nTinyBoard 1.0\nboard>") {
		t.Errorf("request 2 screen:\n%s", screen2)
	}
	screen3 := screenOf(s.request(3))
	if countLines(screen3, "interrupted") != 1 || countLines(screen3, "back") != 2 || countLines(screen3, "abcY") != 1 {
		t.Errorf("request 3 screen:\n%s", screen3)
	}
	t.Logf("console after step 2:\n%s", screen3)
	got := b.received()
	for _, want := range []string{"\runame\r", "sleep\r\x03echo back\r\x1b[A\recho abcX\x7fY\r"} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("board got %q, want it to contain %q", got, want)
		}
	}
	if bytes.IndexByte(got, '\n') >= 0 {
		t.Errorf("board got a LF; Enter must be sent as CR: %q", got)
	}

	// Another session shares the one console and sees its screen.
	s.reset()
	s.reply(1, jsonReply("shared", false, cmd{"echo second\n", 0.3}))
	s.reply(0, jsonReply("done", true))
	if res, _ := runTask(t, r, "dev-2", "again"); res.FinishReason != "stop" {
		t.Fatalf("second session: %+v", res)
	}
	if screen := screenOf(s.request(1)); countLines(screen, "interrupted") != 1 {
		t.Errorf("second session does not see the console's screen:\n%s", screen)
	}
	if countLines(screenOf(s.request(2)), "second") != 1 {
		t.Errorf("second session's command did not run:\n%s", s.request(2))
	}
}
