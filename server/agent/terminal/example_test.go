//go:build unix

package terminal_test

import (
	"context"
	"fmt"
	"os"

	"termlink/server/agent"
	"termlink/server/agent/terminal"
	"termlink/server/config"
)

// A plain-mode agent: any command line, the user's text in place of
// {message}, shell-quoted.
func Example() {
	ws, err := os.MkdirTemp("", "workspace-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(ws)

	r, err := terminal.New("shout", config.TerminalAgent{
		Enabled: true, Command: "echo {message} | tr a-z A-Z", Protocol: "plain",
	}, terminal.Options{})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	res := r.Run(context.Background(), agent.Request{
		ChannelID: "terminal-dev", SessionKey: "terminal-dev:peer1", ChatID: "peer1",
		Text: "hello $(whoami)", Workspace: ws,
	}, nil)
	fmt.Println(res.FinishReason, res.Text)
	// Output: stop HELLO $(WHOAMI)
}

func ExampleParseFrame() {
	for _, line := range []string{
		`{"type":"progress","text":"Thinking..."}`,
		`{"type":"message","text":"Generated image:","media":["/tmp/output.png"]}`,
		`not a frame`,
	} {
		f, ok := terminal.ParseFrame([]byte(line))
		fmt.Printf("%v %q %q %v\n", ok, f.Type, f.Text, f.Media)
	}
	// Output:
	// true "progress" "Thinking..." []
	// true "message" "Generated image:" [/tmp/output.png]
	// false "" "" []
}
