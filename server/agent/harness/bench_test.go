package harness

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"termlink/server/agent"
	"termlink/server/config"
)

// noopAgent answers every step with no commands, never completing.
const noopAgent = `printf '%s' '{"analysis":"","plan":"","commands":[],"task_complete":false}'`

// BenchmarkStep measures one harness step with a no-op agent: build the
// request, run the agent (sh -c), parse, read the screen. ns/op is per
// step.
func BenchmarkStep(b *testing.B) {
	for _, target := range targets {
		b.Run(target, func(b *testing.B) {
			if target == TargetTmux {
				if _, err := exec.LookPath("tmux"); err != nil {
					b.Skip("tmux is not installed")
				}
			}
			r, err := New("bench", defaultBenchConfig(target), Options{Workspace: b.TempDir(), Logger: quiet, Cols: 80, Rows: 24})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			req := agent.Request{SessionKey: "bench", Text: "nothing", Workspace: r.opt.Workspace}
			// Warm up: start the terminal.
			r.cfg.MaxSteps = 1
			if res := r.Run(context.Background(), req, nil); !strings.Contains(res.Text, "step limit") {
				b.Fatalf("warm-up: %+v", res)
			}
			r.cfg.MaxSteps = b.N
			b.ResetTimer()
			res := r.Run(context.Background(), req, nil)
			b.StopTimer()
			if !strings.Contains(res.Text, "step limit") {
				b.Fatalf("result %+v", res)
			}
		})
	}
}

// BenchmarkSpawnBaseline is the cost of the agent process alone (sh -c
// with the request on stdin), to subtract from BenchmarkStep.
func BenchmarkSpawnBaseline(b *testing.B) {
	in := BuildRequest("nothing", "", strings.Repeat("x", 80)+"\n$", false, FormatJSON)
	for b.Loop() {
		cmd := exec.Command("/bin/sh", "-c", noopAgent)
		cmd.Stdin = strings.NewReader(in)
		if _, err := cmd.Output(); err != nil {
			b.Fatal(err)
		}
	}
}

func defaultBenchConfig(target string) (cfg config.HarnessAgent) {
	cfg.Command = noopAgent
	cfg.Target = target
	cfg.MaxSteps = 1
	cfg.MaxDuration = 3600
	cfg.StepTimeout = 60
	return cfg
}
