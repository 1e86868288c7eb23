package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/buildtest"
	"termlink/testrig/chaos"
)

// questionServer is a real termserver whose channel runs the scripted ACP
// agent with permission policy "device" (askSeconds to answer); the
// agent takes the prompt "map" (typed on a keypad: 6 2 7, each the first
// letter of its key) for /perm and appends each permission answer it
// receives to the returned log.
func questionServer(t *testing.T, askSeconds int) (srv *servertest.Server, permLog string) {
	t.Helper()
	permLog = filepath.Join(t.TempDir(), "perm.log")
	srv = servertest.Start(t, func(cfg *config.Config) {
		servertest.WithACP(buildtest.Command(t, "termlink/testrig/agents/acpagent"))(cfg)
		a := cfg.Agents["coder"]
		acp := *a.ACP
		acp.Args = []string{"--perm-word", "map", "--perm-log", permLog}
		acp.Permission, acp.AskTimeout = config.ACPPermissionDevice, askSeconds
		a.ACP = &acp
		cfg.Agents["coder"] = a
	})
	return srv, permLog
}

// answersReceived is what the agent got, one line per permission answer.
func answersReceived(t *testing.T, permLog string) []string {
	t.Helper()
	b, err := os.ReadFile(permLog)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l != "" {
			out = append(out, strings.ReplaceAll(strings.TrimSpace(l), " ", "-"))
		}
	}
	return out
}

// Issue 42 end to end with real binaries: a real ACP agent asks permission
// through a real termserver; termd on the emulated 20x4 LCD (the real
// HD44780 driver on the emulator) shows the question with its options
// under keys, and one key answers:
//   - allow (key 1): the agent receives "yes" once and says "allowed";
//   - deny (key 2) pressed while the link is stalled: the answer waits in
//     termd's outbox, the connection is cut, termd reconnects and resends
//     it; the agent receives "no" once and says "rejected";
//   - a run the operator cancels while its question is on the glass: the
//     agent's request is answered cancelled, and a key pressed after is
//     refused question_closed, which the glass says; the agent receives
//     nothing more.
func TestTermdAnswersAgentQuestionWithOneKey(t *testing.T) {
	t.Parallel()
	srv, permLog := questionServer(t, 60)
	p, err := chaos.New(chaos.Options{Target: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const peer = "desk-q"
	state := filepath.Join(t.TempDir(), "state")
	url := strings.Replace(srv.URL, srv.Addr, p.Addr(), 1)
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim-lcd --state-dir %s --peer-id %s", termdRun, url, state, peer))
	defer func() {
		if t.Failed() {
			l, _ := os.ReadFile(filepath.Join(state, "termd.log"))
			t.Logf("termd.log:\n%s", l)
		}
	}()
	waitScreen("ok│")
	ask := func() {
		t.Helper()
		for _, k := range []string{"6", "2", "7", "#"} {
			tm("send-keys", k)
		}
		s := waitScreen("1 Allow  2 Skip") // both options under their keys, on the first page
		if !strings.Contains(s, "config.json") {
			t.Fatalf("the glass does not show the agent's question:\n%s", s)
		}
	}

	ask()
	tm("send-keys", "1")
	waitScreen("allowed")
	if got := answersReceived(t, permLog); strings.Join(got, ",") != "selected-yes" {
		t.Fatalf("the agent received %q, want one selected yes", got)
	}

	ask()
	p.SetMode(chaos.Stall)
	tm("send-keys", "2")
	waitScreen("Skip") // confirmed on the glass; the answer waits in the outbox
	if got := answersReceived(t, permLog); len(got) != 1 {
		t.Fatalf("an answer reached the agent through a stalled link: %q", got)
	}
	p.SetMode(chaos.Normal)
	p.Cut()
	waitScreen("rejected")
	if got := answersReceived(t, permLog); strings.Join(got, ",") != "selected-yes,selected-no" {
		t.Fatalf("after the reconnect the agent received %q, want yes then no, once each", got)
	}

	ask()
	postJSON(t, "http://"+srv.Addr+"/api/channels/terminal-dev/peers/"+peer+"/cancel", map[string]any{}, 200, nil)
	testwait.Until(t, "the agent's request answered cancelled", func() bool {
		return len(answersReceived(t, permLog)) == 3
	})
	tm("send-keys", "1")
	waitScreen("question closed")
	if got := answersReceived(t, permLog); strings.Join(got, ",") != "selected-yes,selected-no,cancelled" {
		t.Fatalf("the agent received %q, want yes, no, then the cancel's answer, and nothing for the late key", got)
	}
}

// A question nobody answers: the glass counts down and says so when its
// time is up, and the agent receives the policy's fallback (reject: the
// agent's reject option) once.
func TestTermdQuestionTimesOut(t *testing.T) {
	t.Parallel()
	srv, permLog := questionServer(t, 2)
	state := filepath.Join(t.TempDir(), "state")
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim-lcd --state-dir %s --peer-id desk-t", termdRun, srv.URL, state))
	waitScreen("ok│")
	for _, k := range []string{"6", "2", "7", "#"} {
		tm("send-keys", k)
	}
	waitScreen("2 Skip")
	waitScreen("no answer in time")
	waitScreen("rejected")
	if got := answersReceived(t, permLog); strings.Join(got, ",") != "selected-no" {
		t.Fatalf("the agent received %q, want the fallback's reject option once", got)
	}
}
