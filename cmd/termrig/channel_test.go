package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/fleetsim"
)

const chOpSecret = "operator-secret-token-0123456789"

// startChannelServer runs a real termserver with an operator token and
// the channels given (the first is terminal-dev, the default one), and
// writes the token to a file.
func startChannelServer(t *testing.T, channels ...string) (srv *servertest.Server, server, opFile string) {
	t.Helper()
	op, _ := config.NewAdminToken(chOpSecret, config.RoleOperator, "ops")
	srv = servertest.Start(t, func(c *config.Config) {
		c.Admin.Tokens = []config.AdminToken{op}
		def := c.Channels[config.DefaultChannelID]
		for _, id := range channels[1:] {
			ch := def
			ch.DisplayName = id
			c.Channels[id] = ch
		}
	})
	opFile = filepath.Join(t.TempDir(), "op")
	if err := os.WriteFile(opFile, []byte(chOpSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, "http://" + srv.Addr, opFile
}

// startDevice connects a link.Client as peer on the channel; it acks
// pushed settings and answers diag requests naming itself and the
// channel. Without caps it lists no fleet capability (no update: a
// rollout skips it).
func startDevice(t *testing.T, ctx context.Context, srv *servertest.Server, channel, peer string, tags map[string]string, caps ...string) {
	t.Helper()
	client, err := link.NewClient(link.ClientConfig{URL: "ws://" + srv.Addr + "/api/channels/" + channel + "/ws", PeerID: peer,
		StateDir: filepath.Join(t.TempDir(), "dev"), Tags: tags, Capabilities: append(link.DefaultCapabilities(), caps...),
		RetryInitial: 50 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Run(dctx) }()
	go func() {
		for f := range client.Fleet() {
			switch f := f.(type) {
			case *link.Settings:
				_ = client.Report(&link.SettingsAck{Version: f.Version})
			case *link.Diag:
				_ = client.Report(&link.DiagResult{RequestID: f.RequestID, Kind: f.Kind, OK: true,
					Text: fmt.Sprintf("%s of %s on %s\n", f.Kind, peer, channel)})
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	testwait.Until(t, peer+" connected to "+channel, func() bool { return client.Status().State == link.StateConnected })
}

// want checks a termrig command's exit status and that its stdout and
// stderr hold the strings given ("out:" and "err:" prefixed).
func want(t *testing.T, ctx context.Context, status int, wants []string, args ...string) (stdout, stderr string) {
	t.Helper()
	st, out, errs := termrig(ctx, args...)
	ok := st == status
	for _, w := range wants {
		switch {
		case strings.HasPrefix(w, "out:"):
			ok = ok && strings.Contains(out, w[4:])
		case strings.HasPrefix(w, "err:"):
			ok = ok && strings.Contains(errs, w[4:])
		case strings.HasPrefix(w, "!err:"):
			ok = ok && !strings.Contains(errs, w[5:])
		}
	}
	if !ok {
		t.Errorf("termrig %s: exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), st, status, wants, out, errs)
	}
	return out, errs
}

// The fleet commands on a server with two channels (terminal-dev and
// lobby), the kiosks on lobby: none falls back to terminal-dev. Without
// --channel each is refused naming both channels (exit 2), or takes the
// channel that holds the devices (or the rollout) it names and says so;
// with --channel each acts on that channel; a rollout or a settings
// document that reaches no device exits 1 saying so. (Before issue 40
// every one quietly acted on terminal-dev: a rollout there answered
// "done ... skipped" with exit 0.)
func TestFleetCommandsTwoChannels(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, server, opFile := startChannelServer(t, "terminal-dev", "lobby")
	if _, err := fleetsim.Upload(ctx, server, chOpSecret, t.TempDir(), "v2", "linux/arm/6", []byte("termd v2")); err != nil {
		t.Fatal(err)
	}
	// lobby: two kiosks that take releases (lobby-001 fails its gate: a
	// rollout to it pauses and stays), one that takes settings and diag.
	fl, err := fleetsim.Start(ctx, fleetsim.Options{URL: "ws://" + srv.Addr + "/api/channels/lobby/ws", N: 2, Prefix: "lobby-",
		Version: "v1", Fail: []string{"lobby-001"}, FailReason: "crashed at start", Tags: map[string]string{"site": "lobby"}})
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	startDevice(t, ctx, srv, "lobby", "kiosk-1", map[string]string{"site": "lobby"}, link.CapSettings, link.CapDiag)
	// terminal-dev: a device that takes no release; twin is on both.
	startDevice(t, ctx, srv, "terminal-dev", "dev-1", map[string]string{"site": "lab"})
	startDevice(t, ctx, srv, "terminal-dev", "twin", nil, link.CapDiag)
	startDevice(t, ctx, srv, "lobby", "twin", nil, link.CapDiag)
	api, _ := newAPIClient(server, opFile)
	testwait.UntilOK(t, "the two simulated kiosks online on lobby", func() error {
		var l struct{ Peers []struct{ PeerID string } }
		if err := api.getJSON(ctx, server+"/api/channels/lobby/peers?online=true&tag=site:lobby", "listing peers", &l); err != nil {
			return err
		}
		if len(l.Peers) != 3 {
			return fmt.Errorf("%d online: %v", len(l.Peers), l.Peers)
		}
		return nil
	})
	tok := []string{"--server", server, "--admin-token-file", opFile}
	refused := "err:this server has channels lobby, terminal-dev: say which with --channel"

	// release rollout.
	rollout := append([]string{"release", "rollout", "--version", "v2"}, tok...)
	want(t, ctx, 2, []string{refused}, append(rollout, "--all")...)
	want(t, ctx, 2, []string{refused, "err:the devices are on different channels: lobby-002 is on lobby, dev-1 is on terminal-dev"}, append(rollout, "--peers", "lobby-002,dev-1")...)
	want(t, ctx, 2, []string{refused, "err:twin is on lobby and terminal-dev"}, append(rollout, "--peers", "twin")...)
	want(t, ctx, 2, []string{refused, "err:peer nobody is on none of them"}, append(rollout, "--peers", "nobody")...)
	want(t, ctx, 2, []string{refused, "err:the devices tagged site=nowhere is on none of them"}, append(rollout, "--tag", "site=nowhere")...)
	// The case: terminal-dev's only device takes no release.
	want(t, ctx, 1, []string{"out:on terminal-dev: 2 devices", "err:rollout ro-", "err: on terminal-dev updates no device: 2 skipped (it does not list the update capability"},
		append(rollout, "--all", "--channel", "terminal-dev")...)
	// The tag's devices are all on lobby: taken, and said so.
	out, _ := want(t, ctx, 0, []string{"out:on lobby: 3 devices", "err:termrig: channel lobby: the devices tagged site=lobby is there (this server has channels lobby, terminal-dev)"},
		append(rollout, "--tag", "site=lobby", "--canary", "1")...)
	id := regexp.MustCompile(`ro-[0-9a-f]+`).FindString(out)

	// release status.
	status := append([]string{"release", "status"}, tok...)
	want(t, ctx, 2, []string{refused}, status...)
	testwait.UntilOK(t, "the lobby rollout paused by its canary", func() error {
		st, out, errs := termrig(ctx, append(status, "--channel", "lobby")...)
		if st != 0 || !strings.Contains(out, id+" v2: paused (lobby-001 rolled_back: crashed at start)") {
			return fmt.Errorf("exit %d\n%s%s", st, out, errs)
		}
		return nil
	})
	want(t, ctx, 1, []string{"err:no rollout on channel terminal-dev of v9"}, append(status, "--channel", "terminal-dev", "--version", "v9")...)

	// pause, resume, abort: the rollout's channel is the one that holds it.
	note := "err:termrig: channel lobby: rollout " + id + " is there"
	want(t, ctx, 2, []string{refused, "err:rollout ro-0123456789ab is on none of them"}, append([]string{"release", "resume", "ro-0123456789ab"}, tok...)...)
	want(t, ctx, 1, []string{"err:HTTP 404"}, append([]string{"release", "pause", "--channel", "terminal-dev", id}, tok...)...)
	want(t, ctx, 1, []string{note, "err:HTTP 409 rollout " + id + " is paused, not running"}, append([]string{"release", "pause", id}, tok...)...)
	want(t, ctx, 0, []string{note, "out:" + id + " v2: aborted"}, append([]string{"release", "abort", id}, tok...)...)
	// Accepted with --channel.
	want(t, ctx, 0, []string{"out:on lobby: 1 devices", "!err:termrig: channel"}, append(rollout, "--peers", "lobby-002", "--channel", "lobby")...)

	// device settings.
	settings := append([]string{"device", "settings"}, tok...)
	want(t, ctx, 2, []string{refused}, append(settings, "--show")...)
	want(t, ctx, 0, []string{"out:channel lobby: settings version 0"}, append(settings, "--show", "--channel", "lobby")...)
	want(t, ctx, 0, []string{"out:set the settings of peer kiosk-1 on lobby: version 1, pushed to 1 online device(s)", "err:termrig: channel lobby: peer kiosk-1 is there"},
		append(settings, "--peer", "kiosk-1", "--idle-text", "Welcome")...)
	want(t, ctx, 0, []string{"out:set the settings of tag site=lobby on lobby: version 2"}, append(settings, "--tag", "site=lobby", "--idle-seconds", "30")...)
	want(t, ctx, 0, []string{"out:set the settings of peer dev-1 on terminal-dev: version 1", "!err:termrig: channel"}, append(settings, "--peer", "dev-1", "--channel", "terminal-dev", "--log-level", "debug")...)
	want(t, ctx, 2, []string{refused, "err:peer nobody is on none of them"}, append(settings, "--peer", "nobody", "--idle-text", "x")...)
	want(t, ctx, 2, []string{refused, "err:twin is on lobby and terminal-dev"}, append(settings, "--peer", "twin", "--show")...)
	// A document no device gets: exit 1, nothing set; --unknown-ok sets it.
	want(t, ctx, 1, []string{"err:no device on channel lobby matches peer dev-1", "err:nothing was set"}, append(settings, "--peer", "dev-1", "--channel", "lobby", "--idle-text", "x")...)
	want(t, ctx, 1, []string{"err:no device on channel lobby matches the devices tagged site=lab"}, append(settings, "--tag", "site=lab", "--channel", "lobby", "--idle-text", "x")...)
	want(t, ctx, 0, []string{"out:channel lobby: settings version 2, 2 of"}, append(settings, "--show", "--channel", "lobby")...)
	want(t, ctx, 0, []string{"out:set the settings of peer kiosk-9 on lobby: version 3"}, append(settings, "--peer", "kiosk-9", "--channel", "lobby", "--idle-text", "x", "--unknown-ok")...)
	// Without a token: it says the token is missing, not a bare 401.
	for _, args := range [][]string{
		{"device", "settings", "--server", server, "--peer", "kiosk-1", "--show"},
		{"device", "settings", "--server", server, "--peer", "kiosk-1", "--show", "--channel", "lobby"},
	} {
		want(t, ctx, 1, []string{"err:HTTP 401", "err:no admin token was given, and this server needs one: pass --admin-token-file"}, args...)
	}

	// device logs and selftest.
	for _, cmd := range []string{"logs", "selftest"} {
		args := append([]string{"device", cmd}, tok...)
		want(t, ctx, 0, []string{"out:" + cmd + " of kiosk-1 on lobby", "err:termrig: channel lobby: peer kiosk-1 is there"}, append(args, "--peer", "kiosk-1")...)
		want(t, ctx, 0, []string{"out:" + cmd + " of twin on terminal-dev", "!err:termrig: channel"}, append(args, "--peer", "twin", "--channel", "terminal-dev")...)
		want(t, ctx, 2, []string{refused, "err:twin is on lobby and terminal-dev"}, append(args, "--peer", "twin")...)
		want(t, ctx, 2, []string{refused, "err:peer nobody is on none of them"}, append(args, "--peer", "nobody")...)
		want(t, ctx, 1, []string{`err:HTTP 404 no peer "kiosk-1" on channel terminal-dev`}, append(args, "--peer", "kiosk-1", "--channel", "terminal-dev")...)
	}
}

// On a server with one channel (not called terminal-dev), every fleet
// command takes it without --channel, and says nothing about it.
func TestFleetCommandsOneChannel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	op, _ := config.NewAdminToken(chOpSecret, config.RoleOperator, "ops")
	srv := servertest.Start(t, func(c *config.Config) {
		c.Admin.Tokens = []config.AdminToken{op}
		c.Channels = map[string]config.Channel{"kiosks": c.Channels[config.DefaultChannelID]}
	})
	server := "http://" + srv.Addr
	opFile := filepath.Join(t.TempDir(), "op")
	_ = os.WriteFile(opFile, []byte(chOpSecret+"\n"), 0o600)
	if _, err := fleetsim.Upload(ctx, server, chOpSecret, t.TempDir(), "v2", "linux/arm/6", []byte("termd v2")); err != nil {
		t.Fatal(err)
	}
	fl, err := fleetsim.Start(ctx, fleetsim.Options{URL: "ws://" + srv.Addr + "/api/channels/kiosks/ws", N: 1, Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	startDevice(t, ctx, srv, "kiosks", "kiosk-1", nil, link.CapSettings, link.CapDiag)
	api, _ := newAPIClient(server, opFile)
	testwait.UntilOK(t, "the simulated device online", func() error {
		var l struct{ Peers []struct{ PeerID string } }
		if err := api.getJSON(ctx, server+"/api/channels/kiosks/peers?online=true", "listing peers", &l); err != nil {
			return err
		}
		if len(l.Peers) != 2 {
			return fmt.Errorf("%d online: %v", len(l.Peers), l.Peers)
		}
		return nil
	})
	tok := []string{"--server", server, "--admin-token-file", opFile}
	quiet := "!err:termrig: channel"
	out, _ := want(t, ctx, 0, []string{"out:on kiosks: 1 devices", quiet}, append([]string{"release", "rollout", "--version", "v2", "--peers", "sim-001"}, tok...)...)
	id := regexp.MustCompile(`ro-[0-9a-f]+`).FindString(out)
	testwait.UntilOK(t, "the rollout done", func() error {
		st, out, errs := termrig(ctx, append([]string{"release", "status"}, tok...)...)
		if st != 0 || !strings.Contains(out, id+" v2: done") || strings.Contains(errs, "channel") {
			return fmt.Errorf("exit %d\n%s%s", st, out, errs)
		}
		return nil
	})
	want(t, ctx, 1, []string{"err:HTTP 409", quiet}, append([]string{"release", "abort", id}, tok...)...)
	// The one device that takes no release: exit 1.
	want(t, ctx, 1, []string{"err:updates no device"}, append([]string{"release", "rollout", "--version", "v2", "--peers", "kiosk-1"}, tok...)...)
	want(t, ctx, 0, []string{"out:set the settings of peer kiosk-1 on kiosks: version 1", quiet}, append([]string{"device", "settings", "--peer", "kiosk-1", "--idle-text", "hi"}, tok...)...)
	want(t, ctx, 1, []string{"err:no device on channel kiosks matches peer nobody"}, append([]string{"device", "settings", "--peer", "nobody", "--idle-text", "hi"}, tok...)...)
	want(t, ctx, 0, []string{"out:channel kiosks: settings version 1", quiet}, append([]string{"device", "settings", "--show"}, tok...)...)
	want(t, ctx, 0, []string{"out:logs of kiosk-1 on kiosks", quiet}, append([]string{"device", "logs", "--peer", "kiosk-1"}, tok...)...)
	want(t, ctx, 0, []string{"out:selftest of kiosk-1 on kiosks", quiet}, append([]string{"device", "selftest", "--peer", "kiosk-1"}, tok...)...)
}
