// Command direct runs a Terminal Protocol v1 agent directly, N times, with
// an envelope on stdin, and prints the p50/p99 wall time: the baseline the
// server's added latency is measured against (testrig/bench/agents.sh).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"
)

func main() {
	n := flag.Int("n", 300, "runs")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: direct [-n N] -- command [args...]")
		os.Exit(2)
	}
	env := []byte(`{"version":1,"text":"hello","channel":"terminal-dev","chat_id":"bench","session_key":"terminal-dev:local:bench","workspace":"/tmp","user_data_dir":"/tmp/users/bench"}` + "\n")
	times := make([]time.Duration, 0, *n)
	var cpu time.Duration // of the runs' processes
	for i := 0; i < *n; i++ {
		cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
		cmd.Stdin = bytes.NewReader(env)
		start := time.Now()
		out, err := cmd.Output()
		if err != nil || !bytes.Contains(out, []byte("You said: hello")) {
			fmt.Fprintf(os.Stderr, "run %d: %v %q\n", i, err, out)
			os.Exit(1)
		}
		times = append(times, time.Since(start))
		cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	pct := func(p float64) time.Duration { return times[int(p*float64(len(times)-1))] }
	fmt.Printf("direct runs %d  p50 %.2fms  p99 %.2fms  max %.2fms  cpu/run %.2fms\n", len(times),
		float64(pct(0.50))/1e6, float64(pct(0.99))/1e6, float64(times[len(times)-1])/1e6,
		float64(cpu)/1e6/float64(len(times)))
}
