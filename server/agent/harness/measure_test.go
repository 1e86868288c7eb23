package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/config"
)

// TestMeasureStepOverhead reports the harness's own time per step, p50/p99:
// from the agent's answer being parsed to the next request being handed to
// the next agent process (screen capture, request building, typing), and
// the agent process round trip (spawn, stdin, stdout, exit) for a no-op
// agent. Run with TERMLINK_MEASURE=1:
//
//	TERMLINK_MEASURE=1 go test -run TestMeasureStepOverhead -v ./server/agent/harness/
func TestMeasureStepOverhead(t *testing.T) {
	t.Parallel()
	if os.Getenv("TERMLINK_MEASURE") == "" {
		t.Skip("measurement, not a test: set TERMLINK_MEASURE=1 to run it")
	}
	const steps = 300
	dir := t.TempDir()
	agentPath := filepath.Join(dir, "noop.sh")
	script := "#!/bin/sh\ncat >/dev/null\nprintf '%s\\n' '{\"analysis\":\"a\",\"plan\":\"p\",\"commands\":[],\"task_complete\":false}'\n"
	if err := os.WriteFile(agentPath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"pty", "tmux"} {
		r, err := New("bench", config.HarnessAgent{Command: agentPath, Target: target, MaxSteps: steps,
			MaxDuration: 3600, ObservationBytes: 10000, StepTimeout: 30}, Options{Workspace: dir})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		type mark struct {
			at    time.Time
			think bool
		}
		var marks []mark
		progress := func(text string) {
			mu.Lock()
			marks = append(marks, mark{time.Now(), strings.HasSuffix(text, ": thinking")})
			mu.Unlock()
		}
		res := r.Run(context.Background(), agent.Request{SessionKey: "bench:" + target, Text: "noop", Workspace: dir}, progress)
		_ = r.Close()
		var harnessT, agentT []time.Duration
		for i := 0; i+1 < len(marks); i++ {
			switch {
			case marks[i].think && !marks[i+1].think:
				agentT = append(agentT, marks[i+1].at.Sub(marks[i].at))
			case !marks[i].think && marks[i+1].think:
				harnessT = append(harnessT, marks[i+1].at.Sub(marks[i].at))
			}
		}
		if len(harnessT) < steps/2 {
			t.Fatalf("%s: only %d steps measured; result %+v", target, len(harnessT), res)
		}
		fmt.Printf("%s target, %d steps: harness per step p50 %s p99 %s; no-op agent process per step p50 %s p99 %s\n",
			target, len(harnessT), pct(harnessT, 0.5), pct(harnessT, 0.99), pct(agentT, 0.5), pct(agentT, 0.99))
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))].Round(time.Microsecond)
}
