package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"termlink/link"
	"termlink/link/enroll"
	"termlink/testrig/load"
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
	wsURL, err := load.ChannelURL(*server, *channel)
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
	fmt.Fprintf(a.stdout, "pairing code %s (expires in %d s); approve it at %s:\n  curl -X POST %sapi/enrollments/%s/approve -d '{\"peer_id\":\"%s\"}'\n",
		g.Code, g.ExpiresIn, g.VerificationURI, g.VerificationURI, g.Code, *peer)
	if *approve {
		base := strings.TrimSuffix(endpoint, "/api/channels/"+*channel+"/enroll")
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
	reply, err := roundTrip(ctx, wsURL, tr.PeerID, tr.Token)
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
		return fmt.Errorf("approving %s: HTTP %d %s", code, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// roundTrip connects as peer with token and sends one message, returning
// the reply's text.
func roundTrip(ctx context.Context, wsURL, peer, token string) (string, error) {
	dir, err := os.MkdirTemp("", "termrig-enroll-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	cl, err := link.NewClient(link.ClientConfig{URL: wsURL, PeerID: peer, Token: token, DeviceName: "termrig enroll-test", StateDir: dir})
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
		case ev := <-cl.Events():
			switch {
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
