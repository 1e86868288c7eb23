package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"termlink/server/agent"
	"termlink/server/agent/stdio"
)

// proc is one agent process (package stdio) and its ACP connection. Its
// goroutines beyond the base's are the SDK's (reading stdout, dispatching
// notifications and requests).
type proc struct {
	*stdio.Proc

	r *Runner

	// Set by Begin and handshake, before any turn.
	conn      *sdk.ClientSideConnection
	sdkLog    *logGate // the SDK's logger, closed once p is done
	sessionID sdk.SessionId

	mu   sync.Mutex
	turn *turn // the prompt in progress
}

// Begin starts the ACP connection on the process's stdin and stdout
// (stdio.Protocol).
func (p *proc) Begin() {
	// The SDK's receive goroutine starts in NewClientSideConnection and
	// reads the logger unlocked when the agent's output ends; SetLogger
	// is unlocked too. It reads nothing until the logger is set (an
	// agent that exits at once raced here).
	out := &heldReader{r: p.Stdout(), open: make(chan struct{})}
	p.conn = sdk.NewClientSideConnection(client{p}, p.Proc, out)
	p.sdkLog = &logGate{}
	p.conn.SetLogger(slog.New(gatedHandler{p.Log.With("component", "acp-sdk").Handler(), p.sdkLog}))
	close(out.open)
}

// Interrupt cancels a running prompt (stdio.Protocol).
func (p *proc) Interrupt() {
	p.mu.Lock()
	t := p.turn
	p.mu.Unlock()
	if t != nil {
		t.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), p.r.Cfg.WriteTimeout)
		_ = p.conn.Cancel(ctx, sdk.CancelNotification{SessionId: p.sessionID})
		cancel()
	}
}

// Ended reports that an exit the runner did not ask for is a crash
// (stdio.Protocol): an ACP agent does not end itself.
func (p *proc) Ended() bool { return false }

// Finish waits for the SDK's reader (EOF, or the read deadline) and then
// silences its logger (stdio.Protocol).
func (p *proc) Finish() {
	<-p.conn.Done()
	p.sdkLog.close()
}

// awaitExit waits for the process to exit (killing it if it lingers) and
// for its stderr to be read.
func (p *proc) awaitExit() {
	p.AwaitExitFor(2*time.Second, "agent closed its stdout but kept running")
}

// handshake sends initialize and session/new, within startTimeout.
func (p *proc) handshake(ctx context.Context, cwd string) (agent.Result, bool) {
	ctx, cancel := context.WithTimeout(ctx, p.r.startTimeout)
	defer cancel()
	fail := func(step string, err error) (agent.Result, bool) {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return cancelledResult(), false
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errorResult(fmt.Sprintf("The agent did not answer %s within %s; check that agents.%s.acp.command starts an ACP agent.%s",
				step, p.r.startTimeout, p.r.name, p.StderrNote())), false
		}
		return p.errorReply(step, err), false
	}
	init, err := p.conn.Initialize(ctx, sdk.InitializeRequest{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		// No file system and no terminal: termlink is a text screen.
		ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{ReadTextFile: false, WriteTextFile: false}, Terminal: false},
		ClientInfo:         &sdk.Implementation{Name: "termlink", Version: "1"},
	})
	if err != nil {
		return fail("initialize", err)
	}
	if init.ProtocolVersion != sdk.ProtocolVersionNumber {
		return errorResult(fmt.Sprintf("Use an agent that speaks ACP version %d: this one answered version %d.",
			sdk.ProtocolVersionNumber, init.ProtocolVersion)), false
	}
	sess, err := p.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: cwd, McpServers: []sdk.McpServer{}})
	if err != nil {
		return fail("session/new", err)
	}
	p.sessionID = sess.SessionId
	p.Log.Info("agent ready", "acp_session", sess.SessionId, "protocol", init.ProtocolVersion)
	return agent.Result{}, true
}

// errorReply turns a failed ACP request into an error reply whose first
// line says what to do.
func (p *proc) errorReply(step string, err error) agent.Result {
	var re *sdk.RequestError
	if errors.As(err, &re) && !p.disconnected(re) {
		detail := preview(requestErrorText(re), 300)
		if re.Code == -32000 || strings.Contains(strings.ToLower(re.Message), "auth") {
			return errorResult(fmt.Sprintf("Sign the agent in or give it its API key (agents.%s.acp.env in the server config), then send the message again.\n%s: %s%s",
				p.r.name, step, detail, p.StderrNote()))
		}
		return errorResult(fmt.Sprintf("The agent answered %s with an error; send the message again, or check the agent's setup.\n%s%s", step, detail, p.StderrNote()))
	}
	// No answer: the connection ended, i.e. the process exited.
	p.awaitExit()
	what := fmt.Sprintf("the agent exited during %s (%s)", step, exitText(p.ExitErr))
	if reason := p.Reason(); reason != "" {
		what = fmt.Sprintf("the agent was stopped during %s: %s", step, reason)
	}
	if step != "session/prompt" {
		return errorResult(fmt.Sprintf("Check agents.%s.acp.command in the server config: %s.%s", p.r.name, what, p.StderrNote()))
	}
	return errorResult(fmt.Sprintf("The agent stopped; send the message again to start a new one.\n%s.%s", capitalize(what), p.StderrNote()))
}

// disconnected reports whether re is the SDK's "no answer: the peer went
// away", not an error the agent sent.
func (p *proc) disconnected(re *sdk.RequestError) bool {
	if re.Code == -32603 {
		// The request could not be written: the agent's stdin is closed
		// because the agent has exited (it may exit before initialize):
		// EPIPE, or the pipe our side closed once the process was reaped
		// (os.ErrClosed: "file already closed" from a write on the
		// *os.File, "use of closed file" from its poller).
		if t := requestErrorText(re); strings.Contains(t, "broken pipe") || strings.Contains(t, "file already closed") ||
			strings.Contains(t, "use of closed file") {
			return true
		}
	}
	select {
	case <-p.conn.Done():
	default:
		return false
	}
	d, ok := re.Data.(map[string]any)
	return ok && re.Code == -32603 && d["error"] == "peer disconnected before response"
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// requestErrorText is a JSON-RPC error's message and data.
func requestErrorText(re *sdk.RequestError) string {
	s := re.Message
	if re.Data != nil {
		switch d := re.Data.(type) {
		case string:
			s += ": " + d
		case map[string]any:
			for _, k := range []string{"details", "message", "error"} {
				if v, ok := d[k].(string); ok && v != "" {
					return s + ": " + v
				}
			}
			s += fmt.Sprintf(": %v", d)
		default:
			s += fmt.Sprintf(": %v", d)
		}
	}
	return s
}

// logGate silences the SDK's logger once a process is done: the SDK's
// reader goroutine logs "connection closed" after its Done channel has
// closed, so it may still write while (or after) the runner that owns the
// log goes away. close waits for a write in progress; later ones are
// dropped.
type logGate struct {
	mu     sync.RWMutex
	closed bool
}

func (g *logGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

type gatedHandler struct {
	h slog.Handler
	g *logGate
}

func (h gatedHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h gatedHandler) Handle(ctx context.Context, r slog.Record) error {
	h.g.mu.RLock()
	defer h.g.mu.RUnlock()
	if h.g.closed {
		return nil
	}
	return h.h.Handle(ctx, r)
}

func (h gatedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return gatedHandler{h.h.WithAttrs(as), h.g}
}

func (h gatedHandler) WithGroup(name string) slog.Handler {
	return gatedHandler{h.h.WithGroup(name), h.g}
}

// heldReader reads r once open is closed.
type heldReader struct {
	r    io.Reader
	open chan struct{}
}

func (h *heldReader) Read(b []byte) (int, error) {
	<-h.open
	return h.r.Read(b)
}
