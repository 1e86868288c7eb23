package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"termlink/link"
	"termlink/link/enroll"
)

const enrollTestSynopsis = `--server URL [--channel ID] [--peer-id ID] [--approve [--admin-token-file F]] [--timeout D]

Runs enrollment by pairing code against a server, as a new termd would:
asks the channel's enroll endpoint for a code, prints it, waits for an
operator to approve it (POST /api/enrollments/{code}/approve; with
--approve this command approves it itself), connects with the device token
it receives and sends one message. The token is never printed.`

func (a *app) enrollTest(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("enroll-test", enrollTestSynopsis)
	server := fs.String("server", "", "server `URL` (required), e.g. http://127.0.0.1:8080")
	channel := fs.String("channel", "terminal-dev", "channel `id` when the URL has no path")
	peer := fs.String("peer-id", fmt.Sprintf("termrig-enroll-%d", time.Now().Unix()%100000), "peer `id` to ask for")
	approve := fs.Bool("approve", false, "approve the code through the operator API (loopback, or with --admin-token-file)")
	adminFile := fs.String("admin-token-file", "", "`file` holding an operator admin token, for --approve")
	timeout := 10 * time.Minute
	fs.Var(durationFlag{&timeout}, "timeout", "limit `D` for the whole test (approval included)")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	if *server == "" {
		return usagef("--server is required (e.g. --server http://127.0.0.1:8080)")
	}
	wsURL, err := link.ChannelURL(*server, *channel)
	if err != nil {
		return usagef("%v", err)
	}
	endpoint, err := enroll.EndpointFor(wsURL)
	if err != nil {
		return err
	}
	admin := ""
	if *adminFile != "" {
		if admin, err = enroll.ReadTokenFile(*adminFile); err != nil {
			return fmt.Errorf("--admin-token-file: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 30 * time.Second}
	c := enroll.Client{HTTP: hc, Endpoint: endpoint}
	g, err := c.Start(ctx, enroll.StartRequest{PeerID: *peer, DeviceName: "termrig enroll-test"})
	if err != nil {
		return err
	}
	base := strings.TrimSuffix(endpoint, "/api/channels/"+*channel+"/enroll")
	fmt.Fprintf(a.stdout, "pairing code %s (expires in %d s); approve it at %s:\n%s", g.Code, g.ExpiresIn, g.VerificationURI,
		approveCommand(base, g.Code, *peer, *adminFile))
	if *approve {
		if err := approveCode(ctx, hc, base, g.Code, *peer, admin); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout, "approved through the operator API")
	}
	tr, err := c.Wait(ctx, g)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "enrolled as peer_id %s on channel %s (token received, %d characters; not shown)\n", tr.PeerID, tr.ChannelID, len(tr.Token))
	// The link's own log in termrig's format (slog key=value on stderr, as
	// load and chaos), warnings only: the steps above are the output.
	log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reply, err := roundTrip(ctx, wsURL, tr.PeerID, tr.Token, log)
	if err != nil {
		return fmt.Errorf("connecting with the enrolled token: %w", err)
	}
	fmt.Fprintf(a.stdout, "connected with the enrolled token; reply: %s\nPASS enroll-test\n", reply)
	return nil
}

func approveCode(ctx context.Context, hc *http.Client, base, code, peer, admin string) error {
	body, _ := json.Marshal(map[string]any{"peer_id": peer, "name": "termrig enroll-test"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/enrollments/"+code+"/approve", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json") // the API takes JSON only
	if admin != "" {
		req.Header.Set("Authorization", "Bearer "+admin)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("approving %s: %w", code, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := fmt.Sprintf("approving %s: HTTP %d %s", code, resp.StatusCode, apiError(b))
		switch {
		case resp.StatusCode == http.StatusUnauthorized && admin == "":
			msg += " (the server has admin tokens: pass --admin-token-file with an operator token)"
		case resp.StatusCode == http.StatusUnauthorized:
			msg += " (the server did not accept the token in --admin-token-file)"
		case resp.StatusCode == http.StatusForbidden && admin != "":
			msg += " (the token in --admin-token-file needs the operator role)"
		}
		return errors.New(msg)
	}
	return nil
}

// apiError is the text of the API's {"error": "..."} body, or the body.
func apiError(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

// approveCommand is the curl command that approves code, as an operator
// would type it: JSON (the API takes JSON only) and, with an admin token
// file, its token read from the file rather than printed.
func approveCommand(base, code, peer, adminFile string) string {
	body, _ := json.Marshal(map[string]string{"peer_id": peer})
	auth := ""
	if adminFile != "" {
		auth = ` -H "Authorization: Bearer $(cat ` + shellQuote(adminFile) + `)"`
	}
	cmd := fmt.Sprintf("  curl -X POST%s -H 'Content-Type: application/json' %s -d %s\n",
		auth, shellQuote(base+"/api/enrollments/"+code+"/approve"), shellQuote(string(body)))
	if adminFile == "" {
		cmd += "  (a server with admin tokens also needs -H \"Authorization: Bearer $(cat ADMIN_TOKEN_FILE)\")\n"
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// roundTrip connects as peer with token and sends one message, returning
// the reply's text.
// The link's log goes to log (termrig's key=value lines on stderr).
func roundTrip(ctx context.Context, wsURL, peer, token string, log *slog.Logger) (string, error) {
	dir, err := os.MkdirTemp("", "termrig-enroll-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	cl, err := link.NewClient(link.ClientConfig{URL: wsURL, PeerID: peer, Token: token, DeviceName: "termrig enroll-test", StateDir: dir, Logger: log})
	if err != nil {
		return "", err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cl.Run(rctx) }()
	defer func() { stop(); <-done; _ = cl.Close() }()
	id, err := cl.Send(ctx, "hello from enroll-test")
	if err != nil {
		return "", err
	}
	for {
		select {
		case <-ctx.Done():
			return "", errors.New("no reply before the timeout")
		case ev, ok := <-cl.Events():
			switch {
			case !ok:
				return "", fmt.Errorf("link closed: %s", cl.Status().Reason)
			case ev.Kind == link.EventReply && ev.MessageID == id:
				cl.Delivered(id)
				return ev.Reply.Text, nil
			case ev.Kind == link.EventError && ev.Code == link.CodeUnauthorized:
				return "", fmt.Errorf("refused: %v", ev.Err)
			case ev.Kind == link.EventState && ev.State == link.StateClosed:
				return "", fmt.Errorf("link closed: %s", ev.Reason)
			}
		}
	}
}
