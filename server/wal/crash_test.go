package wal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/testrig/childtest"

	"termlink/internal/testwait"
)

const childEnv = "WAL_TEST_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild opens the log in dir and appends from 8 goroutines until
// killed, printing "ack <lsn> <payload>" after each Append returns.
func crashChild(dir string) {
	l, err := Open(dir, Options{SegmentBytes: 64 << 10, Logger: quiet}, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	var out sync.Mutex
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				p := fmt.Sprintf("p%d-g%d-%d-%s", os.Getpid(), g, i, strings.Repeat("x", rand.IntN(300)))
				lsn, err := l.Append(context.Background(), []byte(p))
				if err != nil {
					fmt.Println("error", err)
					os.Exit(1)
				}
				out.Lock()
				// One write(2) per line: a pipe write under PIPE_BUF is atomic.
				os.Stdout.WriteString("ack " + strconv.FormatUint(uint64(lsn), 10) + " " + p + "\n")
				out.Unlock()
			}
		}()
	}
	select {}
}

// TestCrashKeepsAcknowledged runs a child that appends and acknowledges
// over a pipe, kills it with SIGKILL at a random moment, and checks after
// reopening that every acknowledged record is there under its LSN; it
// does this a few times on the same log.
//
// Not parallel: a child forked while another test closes a log holds
// that log's LOCK (flock goes with the open file, which the child shares
// until its exec), and the other test's reopen is refused.
func TestCrashKeepsAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	acked := map[LSN]string{}
	for round := range 4 {
		p := childtest.Start(t, childEnv+"="+dir)
		p.WaitLine(t, "ready", testwait.Deadline)
		// A random moment: after some acks, then a random pause.
		want := 1 + rand.IntN(2000)
		testwait.UntilOK(t, fmt.Sprintf("%d acks", want), func() error {
			if errs := p.Lines("error "); len(errs) > 0 {
				t.Fatalf("child: %v", errs)
			}
			if n := len(p.Lines("ack ")); n < want {
				return fmt.Errorf("%d acks", n)
			}
			return nil
		})
		time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
		p.Signal(t, syscall.SIGKILL)
		lines := p.Lines("ack ")
		for _, line := range lines {
			n, payload, _ := strings.Cut(line, " ")
			lsn, err := strconv.ParseUint(n, 10, 64)
			if err != nil {
				t.Fatalf("bad ack line %q", line)
			}
			if old, dup := acked[LSN(lsn)]; dup {
				t.Fatalf("LSN %d acknowledged twice: %q and %q", lsn, old, payload)
			}
			acked[LSN(lsn)] = payload
		}
		l, recs, err := tryOpen(dir, Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		l.Close()
		have := map[LSN]string{}
		for i, r := range recs {
			if r.lsn != LSN(i+1) {
				t.Fatalf("round %d: record %d has LSN %d", round, i, r.lsn)
			}
			have[r.lsn] = r.payload
		}
		for lsn, p := range acked {
			if have[lsn] != p {
				t.Fatalf("round %d: acknowledged LSN %d %.40q missing or changed after SIGKILL: %.40q", round, lsn, p, have[lsn])
			}
		}
		t.Logf("round %d: killed after %d acks (%d in all), %d records on disk", round, len(lines), len(acked), len(recs))
	}
}
