package main

// termrig device logs | selftest: a device's log and its self-test over
// its session, through termserver's operator API (package server/diag):
//
//	GET  /api/channels/{channel}/peers/{peer}/logs?bytes=N   text/plain
//	POST /api/channels/{channel}/peers/{peer}/selftest       {"ok", "text", "took"}

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"termlink/link"
)

const deviceDiagSynopsis = `logs|selftest --server URL --peer P [--channel C] [--admin-token-file F]

  logs --server URL --peer P [--bytes N]   print the last N bytes of the device's
                                           log (default 16384, at most 65536)
  selftest --server URL --peer P           run the device's self-checks that need
                                           no person; print the report; exit 1
                                           when a check failed

Both go to the device over its own session: it must be connected and run a
termd that lists the capability "diag". Both need the operator role.
Without --channel: the server's only channel, or the one the peer is on.`

// deviceDiag runs `termrig device logs|selftest ARGS` (args[0] is logs
// or selftest) on the process's stdout and stderr; the device command
// hands those subcommands to it.
func deviceDiag(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &app{stdout: os.Stdout, stderr: os.Stderr}
	return a.deviceDiag(ctx, args)
}

// deviceDiag is deviceDiag on a's outputs.
func (a *app) deviceDiag(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("which device command? logs or selftest")
	}
	switch args[0] {
	case "logs":
		return a.deviceLogs(ctx, args[1:])
	case "selftest":
		return a.deviceSelftest(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(a.stdout, "Usage: termrig device %s\n", deviceDiagSynopsis)
		return flag.ErrHelp
	}
	return usagef("unknown device command %q: logs or selftest", args[0])
}

// peerFlags are the flags of both: the server, the token, the peer.
type peerFlags struct {
	server, tokenFile, peer, channel *string
}

func (a *app) peerFlags(fs *flag.FlagSet) peerFlags {
	var p peerFlags
	p.server, p.tokenFile = a.serverFlags(fs)
	p.peer = fs.String("peer", "", "the device's peer `id` (required)")
	p.channel = channelFlag(fs, "the device's channel")
	return p
}

// client checks the flags and returns the API client and the peer's
// path, on its channel (a.channelFor's).
func (a *app) client(ctx context.Context, p peerFlags) (*apiClient, string, error) {
	if *p.peer == "" {
		return nil, "", usagef("--peer is required: the device's peer id (termrig shows them in the console, or GET /api/channels/ID/peers)")
	}
	c, err := newAPIClient(*p.server, *p.tokenFile)
	if err != nil {
		return nil, "", err
	}
	ch, err := a.channelFor(ctx, c, *p.channel, selection{peers: []string{*p.peer}})
	if err != nil {
		return nil, "", err
	}
	return c, c.base + "/api/channels/" + url.PathEscape(ch) + "/peers/" + url.PathEscape(*p.peer), nil
}

// diagDo is apiClient.do with this API's hint for a server without it.
func diagDo(c *apiClient, req *http.Request, what string) ([]byte, error) {
	b, err := c.do(req, what)
	if err != nil && strings.Contains(err.Error(), "404 page not found") {
		msg := strings.Replace(err.Error(), "(this server has no release store: an older termserver?)", "", 1)
		return nil, fmt.Errorf("%s(this server has no logs and self-tests on demand: an older termserver?)", msg)
	}
	return b, err
}

func (a *app) deviceLogs(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("device logs", "--server URL --peer P [--bytes N] [--channel C] [--admin-token-file F]\n\nPrints the end of a connected device's log (termd keeps the last 256 KiB in memory).")
	p := a.peerFlags(fs)
	n := 16 << 10
	fs.Var(intFlag{&n}, "bytes", "at most `N` bytes, from a line's start (1 to 65536)")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	if n < 1 || n > link.MaxDiagBytes {
		return usagef("--bytes must be from 1 to %d, got %d", link.MaxDiagBytes, n)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the server gives the device 15 s
	defer cancel()
	c, path, err := a.client(ctx, p)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path+"/logs?bytes="+strconv.Itoa(n), nil)
	if err != nil {
		return err
	}
	b, err := diagDo(c, req, "the log of "+*p.peer)
	if err != nil {
		return err
	}
	_, err = a.stdout.Write(b)
	return err
}

func (a *app) deviceSelftest(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("device selftest", "--server URL --peer P [--channel C] [--admin-token-file F] [--json]\n\nRuns a connected device's self-checks that need no person and prints the report.\nExit status 1 when a check failed.")
	p := a.peerFlags(fs)
	asJSON := fs.Bool("json", false, "print the answer as JSON (ok, text, took)")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second) // the server gives the device 60 s
	defer cancel()
	c, path, err := a.client(ctx, p)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, path+"/selftest", strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	b, err := diagDo(c, req, "the self-test of "+*p.peer)
	if err != nil {
		return err
	}
	var ans struct {
		OK   bool   `json:"ok"`
		Text string `json:"text"`
		Took string `json:"took"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return fmt.Errorf("the self-test of %s: the answer is not the report expected: %v", *p.peer, err)
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(ans); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "%s(%s answered in %s)\n", ans.Text, *p.peer, ans.Took)
	}
	if !ans.OK {
		return exitFailed
	}
	return nil
}
