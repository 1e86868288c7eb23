package sdlisten

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		pid, fds, names string
		want            int
		err             string
	}{
		{"", "", "", 0, ""},
		{"42", "1", "", 1, ""},
		{"42", "2", "web:debug", 2, ""},
		{"42", "0", "", 0, ""},
		{"7", "1", "", 0, ""}, // for another process: not ours, no error
		{"42", "", "", 0, "LISTEN_PID=\"42\" without LISTEN_FDS"},
		{"", "1", "", 0, "without LISTEN_PID"},
		{"x", "1", "", 0, "LISTEN_PID=\"x\" is not a process id"},
		{"-1", "1", "", 0, "is not a process id"},
		{"42", "one", "", 0, "LISTEN_FDS=\"one\" is not a count"},
		{"42", "-2", "", 0, "is not a count"},
		{"42", "100000", "", 0, "is not a count"},
		{"42", "2", "web", 0, "names 1 descriptors, LISTEN_FDS=2"},
	} {
		n, err := Count(c.pid, c.fds, c.names, 42)
		if c.err == "" {
			if err != nil || n != c.want {
				t.Errorf("Count(%q, %q, %q) = %d, %v; want %d", c.pid, c.fds, c.names, n, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("Count(%q, %q, %q) = %d, %v; want an error with %q", c.pid, c.fds, c.names, n, err, c.err)
		}
	}
}

func FuzzCount(f *testing.F) {
	f.Add("42", "1", "web")
	f.Add("", "", "")
	f.Add("42", "3", "a:b:c")
	f.Fuzz(func(t *testing.T, pid, fds, names string) {
		n, err := Count(pid, fds, names, 42)
		if err != nil && n != 0 {
			t.Fatalf("%d descriptors with an error", n)
		}
		if n < 0 || n > maxFDs {
			t.Fatalf("%d descriptors", n)
		}
	})
}

// The child half of the tests below: run by the test binary itself with
// a descriptor at 3, it takes the passed sockets and says what it got on
// stdout: an error, or for each listener its name and one echoed line
// from a connection the parent makes.
func TestMain(m *testing.M) {
	if os.Getenv("SDLISTEN_CHILD") == "" {
		os.Exit(m.Run())
	}
	lns, err := Listeners()
	left := os.Getenv("LISTEN_FDS") + os.Getenv("LISTEN_PID") + os.Getenv("LISTEN_FDNAMES")
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(0)
	}
	fmt.Printf("listeners %d env %q\n", len(lns), left)
	for _, l := range lns {
		fmt.Printf("fd %d name %q\n", l.FD, l.Name)
		c, err := l.Accept()
		if err != nil {
			fmt.Printf("accept: %v\n", err)
			os.Exit(0)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "got %s", line)
		c.Close()
	}
	os.Exit(0)
}

// child runs the test binary as the child above with f at descriptor 3
// and env; LISTEN_PID is set to the child's own pid when pid is "self".
func child(t *testing.T, f *os.File, pid string, env ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `exec "$0"`
	if pid == "self" {
		script = `LISTEN_PID=$$ exec "$0"`
	} else if pid != "" {
		env = append(env, "LISTEN_PID="+pid)
	}
	cmd := exec.Command("sh", "-c", script, exe)
	cmd.Env = append(os.Environ(), append(env, "SDLISTEN_CHILD=1")...)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	s, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("child's output: %q, %v", s, err)
	}
	return strings.TrimSpace(s)
}

func tcpListenerFile(t *testing.T) (*os.File, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fileOf(t, ln.(*net.TCPListener)), ln.Addr().String()
}

// fileOf is a duplicate of a socket's descriptor, closed at the test's end.
func fileOf(t *testing.T, s interface{ File() (*os.File, error) }) *os.File {
	t.Helper()
	f, err := s.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// A passed listening socket is served by the child, which takes it and
// clears the variables; a connection made before the child accepts
// waits in the socket's queue, which is what keeps a port across a
// restart.
func TestListenersServesThePassedSocket(t *testing.T) {
	f, addr := tcpListenerFile(t)
	c, err := net.Dial("tcp", addr) // queued: nobody accepts yet
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "hello\n"); err != nil {
		t.Fatal(err)
	}
	_, out := child(t, f, "self", "LISTEN_FDS=1", "LISTEN_FDNAMES=web")
	if got := readLine(t, out); got != `listeners 1 env ""` {
		t.Fatalf("child: %s", got)
	}
	if got := readLine(t, out); got != `fd 3 name "web"` {
		t.Fatalf("child: %s", got)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "got hello\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
}

// Variables for another process are left alone (but cleared), and a
// descriptor that is not a listening stream socket is refused by name.
func TestListenersRefusesWhatIsNotAListeningSocket(t *testing.T) {
	t.Run("another process's", func(t *testing.T) {
		f, _ := tcpListenerFile(t)
		_, out := child(t, f, "1", "LISTEN_FDS=1")
		if got := readLine(t, out); got != `listeners 0 env ""` {
			t.Fatalf("child: %s", got)
		}
	})
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	uf := fileOf(t, udp.(*net.UDPConn))
	_, addr := tcpListenerFile(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cf := fileOf(t, conn.(*net.TCPConn))
	regular, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	for _, c := range []struct {
		name string
		f    *os.File
		want string
	}{
		{"udp", uf, "error: socket activation: descriptor 3: not a stream socket"},
		{"connected", cf, "error: socket activation: descriptor 3: a connected stream socket, not a listening one"},
		{"file", regular, "error: socket activation: descriptor 3: not a socket"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, out := child(t, c.f, "self", "LISTEN_FDS=1")
			if got := readLine(t, out); !strings.HasPrefix(got, c.want) {
				t.Fatalf("child: %s\nwant: %s", got, c.want)
			}
		})
	}
	t.Run("bad count", func(t *testing.T) {
		_, out := child(t, uf, "self", "LISTEN_FDS=many")
		if got := readLine(t, out); !strings.Contains(got, `LISTEN_FDS="many" is not a count`) {
			t.Fatalf("child: %s", got)
		}
	})
}
