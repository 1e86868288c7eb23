package server

import (
	"os"
	"path/filepath"
	"testing"

	"termlink/link"
	"termlink/server/config"
)

// withNuumAgent routes terminal-dev to a Nuum agent.
func withNuumAgent(command string) func(*config.Config) {
	return func(c *config.Config) {
		c.Agents["nuum"] = config.Agent{Nuum: &config.NuumAgent{Command: command, IdleTimeout: 600, MaxProcesses: 4,
			StartTimeout: 30, HeartbeatSeconds: 30, HeartbeatTimeout: 10}}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "nuum"
		c.Channels["terminal-dev"] = ch
	}
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A Terminal Protocol v1 rich-mode line {"type":"notice"} becomes a notice
// (source agent) for the session's device, apart from the reply.
func TestTerminalAgentNoticeLine(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `cat >/dev/null
echo '{"type":"notice","text":"Stock low: order paper"}'
echo '{"type":"message","text":"ok"}'
`)
	ts := startServer(t, withTerminalAgent(config.TerminalAgent{Command: script}), nil)
	c := dial(t, ts.ws, nil)
	c.connect("till-1", noticeCaps...)
	c.send(&link.Message{MessageID: "m1", Text: "check stock"})
	readAs[*link.Ack](c)
	var notice *link.Notice
	var reply *link.Message
	for notice == nil || reply == nil {
		switch f := c.read().(type) {
		case *link.Notice:
			notice = f
		case *link.Message:
			reply = f
		default:
			t.Fatalf("unexpected %+v", f)
		}
	}
	if notice.Text != "Stock low: order paper" || reply.Text != "ok" {
		t.Fatalf("notice %+v, reply %+v", notice, reply)
	}
	if got := ts.peerNotices(t, "till-1", false); len(got) != 1 || got[0].Source != "agent" {
		t.Fatalf("mailbox %+v", got)
	}
	c.send(&link.NoticeAck{NoticeID: notice.NoticeID})
	c.quiet()
}

// A Nuum agent that speaks after its turn ended (an assistant frame
// outside any turn) reaches the session's device as a notice, also when
// the device is offline at that moment.
func TestNuumAgentPushAfterTurn(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `echo '{"type":"system","subtype":"init","session_id":"s-1"}'
while IFS= read -r line; do
  case "$line" in
    *heartbeat*) echo '{"type":"system","subtype":"heartbeat_ack"}' ;;
    *'"type":"user"'*)
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"done"}]}}'
      echo '{"type":"result","subtype":"success","result":"done"}'
      sleep 0.5
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Reminder: the lobby closes at six"}]}}'
      ;;
  esac
done
`)
	ts := startServer(t, withNuumAgent(script), nil)
	c := dial(t, ts.ws, nil)
	c.connect("lobby-2", noticeCaps...)
	c.send(&link.Message{MessageID: "m1", Text: "hello"})
	readAs[*link.Ack](c)
	if m := readAs[*link.Message](c); m.Text != "done" {
		t.Fatalf("reply %+v", m)
	}
	c.ws.Close() // offline when the agent speaks again
	ts.waitEvent(t, "notice_created", "")
	c = dial(t, ts.ws, nil)
	c.connect("lobby-2", noticeCaps...)
	n := readAs[*link.Notice](c)
	if n.Text != "Reminder: the lobby closes at six" {
		t.Fatalf("notice %+v", n)
	}
	if got := ts.peerNotices(t, "lobby-2", false); len(got) != 1 || got[0].Source != "agent" {
		t.Fatalf("mailbox %+v", got)
	}
}

// What a Nuum agent sends for a turn the runner gave up on (cancelled,
// interrupted without a result) is not pushed: only what it says after
// that turn's result is.
func TestNuumAgentAbandonedTurnNotPushed(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `echo '{"type":"system","subtype":"init","session_id":"s-2"}'
while IFS= read -r line; do
  case "$line" in
    *heartbeat*) echo '{"type":"system","subtype":"heartbeat_ack"}' ;;
    *'"type":"user"'*) echo '{"type":"system","subtype":"turn_accepted"}' ;;
    *'"action":"interrupt"'*)
      echo '{"type":"system","subtype":"interrupted"}'
      sleep 1.5
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"late part of the cancelled turn"}]}}'
      echo '{"type":"result","subtype":"success","result":"late"}'
      sleep 0.3
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Reminder after the turn"}]}}'
      ;;
  esac
done
`)
	ts := startServer(t, withNuumAgent(script), nil)
	c := dial(t, ts.ws, nil)
	c.connect("lobby-3", link.CapText, link.CapCancel, link.CapProgress, link.CapNotice)
	c.send(&link.Message{MessageID: "m1", Text: "wait"})
	readAs[*link.Ack](c)
	readAs[*link.Progress](c) // the turn is open
	c.send(&link.Cancel{MessageID: "m1"})
	if m := readAs[*link.Message](c); m.FinishReason != link.FinishCancelled {
		t.Fatalf("reply %+v", m)
	}
	if n := readAs[*link.Notice](c); n.Text != "Reminder after the turn" {
		t.Fatalf("notice %+v, want only the reminder", n)
	}
	c.quiet()
}
