package load

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	const tail = " S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 200 300"
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		err        string
	}{
		{"plain", "42 (termserver)" + tail, 3 * time.Second, ""},
		{"name with spaces and parens", "42 (a (b) c)" + tail, 3 * time.Second, ""},
		{"no name", "42 termserver S 1", 0, "no command name"},
		{"short", "42 (x) S 1 2 3", 0, "fields after the command name"},
		{"not a number", "42 (x) S 1 2 3 4 5 6 7 8 9 10 x 50 0", 0, `cpu time "x"`},
	} {
		got, err := parseStatCPU("stat", []byte(tc.stat))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}

func FuzzParseStatCPU(f *testing.F) {
	f.Add([]byte("42 (termserver) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if d, err := parseStatCPU("stat", data); err == nil && d < 0 {
			t.Fatalf("negative cpu time %v", d)
		}
	})
}

// The report carries the server's CPU time over the send and drain phase:
// here the server runs in this process, so its pid is ours.
func TestServerCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	srv, err := startRealServer(t.TempDir(), "127.0.0.1:0", realOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Run(ctx, Options{URL: srv.URL, Devices: 10, Rate: 300, Duration: 2 * time.Second, ServerPID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ServerCPUError != "" || rep.ServerCPUMs <= 0 || rep.ServerCPUReplies <= 0 || rep.ServerCPUReplies > rep.Replied ||
		rep.ServerCPUPerReplyUs <= 0 {
		t.Fatalf("server cpu %vms over %d replies (%vµs each), error %q; replied %d", rep.ServerCPUMs, rep.ServerCPUReplies,
			rep.ServerCPUPerReplyUs, rep.ServerCPUError, rep.Replied)
	}
	if _, err := Run(ctx, Options{URL: srv.URL, Devices: 1, Rate: 1, Duration: time.Second, ServerPID: 1 << 30}); err == nil ||
		!strings.Contains(err.Error(), "server pid") {
		t.Fatalf("missing pid: err %v", err)
	}
}
