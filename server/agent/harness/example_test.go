package harness_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"termlink/server/agent"
	"termlink/server/agent/harness"
	"termlink/server/config"
)

func ExampleParse() {
	r := harness.Parse(`Here is my answer:
{"analysis": "Empty directory.", "plan": "Look around.",
 "commands": [{"keystrokes": "ls -la\n", "duration": 0.5}, {"keystrokes": "C-c"}]}`)
	fmt.Println(r.Format, r.OK(), r.TaskComplete)
	for _, c := range r.Commands {
		fmt.Printf("%q key=%v wait=%v\n", c.Keystrokes, harness.IsKey(c.Keystrokes), c.Duration)
	}
	for _, w := range r.Warnings {
		fmt.Println("warning:", w)
	}
	// Output:
	// json true false
	// "ls -la\n" key=false wait=500ms
	// "C-c" key=true wait=1s
	// warning: Extra text detected before JSON object
	// warning: Command 2: Missing duration field, using default 1.0
}

func ExampleParseXML() {
	r := harness.ParseXML(`<response>
<analysis>Done.</analysis>
<plan>Nothing left.</plan>
<commands></commands>
<task_complete>true</task_complete>
</response>`)
	fmt.Println(r.Format, r.OK(), r.TaskComplete, r.Analysis)
	// Output: xml true true Done.
}

func ExampleBuildRequest() {
	fmt.Print(harness.BuildRequest("Print hello.", "", "user@host:~$", false, harness.FormatJSON))
	// Output:
	// Task Description:
	// Print hello.
	//
	// Current terminal state:
	// user@host:~$
}

func ExampleNew() {
	ws, _ := os.MkdirTemp("", "harness-example")
	defer os.RemoveAll(ws)
	// An agent that says it is done, twice.
	cfg := config.HarnessAgent{
		Command: `cat >/dev/null; echo '{"analysis":"Nothing to do.","plan":"","commands":[],"task_complete":true}'`,
		Target:  "pty",
	}
	r, err := harness.New("example", cfg, harness.Options{Workspace: ws, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	res := r.Run(context.Background(), agent.Request{SessionKey: "s", Text: "Do nothing."}, func(p string) { fmt.Println("progress:", p) })
	fmt.Println(res.FinishReason)
	fmt.Println(res.Text)
	// Output:
	// progress: step 1: thinking
	// progress: step 1: says the task is complete
	// progress: step 2: thinking
	// progress: step 2: says the task is complete
	// stop
	// Nothing to do.
	//
	// Task complete (confirmed at step 2).
}
