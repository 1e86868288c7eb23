// Command termserver serves the terminal WebSocket channel and routes each
// message to its agent.
//
//	termserver [--config FILE] [--listen ADDR] [--log-level LEVEL]
//	termserver --check-config FILE
//	termserver --version
//
// With no config it serves channel terminal-dev (kind terminal, mode
// websocket, account local) with the built-in echo agent on 127.0.0.1:8080,
// with the workspace ./workspace. With a config that gives no workspace
// (or a relative one), the workspace is beside the config file. The
// workspace in use is in the "termserver listening" log line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"termlink/internal/buildinfo"
	"termlink/internal/debugserver"
	"termlink/internal/memtrim"
	"termlink/internal/sdlisten"
	"termlink/link/discover"
	"termlink/server"
	"termlink/server/config"
)

// version is termserver's version; release builds set it with
// -ldflags "-X main.version=v1.2.3" (make pi does). Otherwise --version
// gives the module version and the commit from the build info.
var version = ""

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "termserver:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("termserver", flag.ContinueOnError)
	fs.Usage = func() { printUsage(fs) }
	cfgPath := fs.String("config", "", "JSON config `file` (default: channel terminal-dev with the echo agent)")
	listen := fs.String("listen", "", "listen `address`, overrides the config (default 127.0.0.1:8080)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	noSync := fs.Bool("unsafe-no-fsync", false, "do not fsync the session log (benchmarks only: a crash can lose accepted messages)")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "how long runs in progress may finish at shutdown")
	tlsCert := fs.String("tls-cert", "", "PEM `file` of the TLS certificate (chain), overrides tls.certFile; reloaded on SIGHUP")
	tlsKey := fs.String("tls-key", "", "PEM `file` of the TLS private key, overrides tls.keyFile")
	debugAddr := fs.String("debug-addr", "", "serve net/http/pprof on this loopback `address` (e.g. 127.0.0.1:6060; off by default)")
	checkConfig := fs.String("check-config", "", "check the config `file` as start-up would (every problem with its key path) and exit: 0 when it is good, 1 when not")
	showVersion := fs.Bool("version", false, "print the version (module version, commit, toolchain) and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 && fs.Arg(0) != "export-sessions" {
		return fmt.Errorf("unexpected argument %q (flags only, or the command export-sessions DIR; see --help)", fs.Arg(0))
	}
	if *showVersion {
		fmt.Fprint(os.Stdout, buildinfo.Read(version).String("termserver"))
		return nil
	}
	if *checkConfig != "" {
		return checkConfigFile(*checkConfig, os.Stdout, os.Stderr)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", *level)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	discover.LibraryLog(log) // the mDNS library's lines ("discovery" on) at debug

	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if fs.NArg() > 0 {
		return exportSessions(cfg, fs.Args()[1:], log)
	}
	if err := tlsFlags(cfg, *tlsCert, *tlsKey); err != nil {
		return err
	}
	srv, err := server.New(cfg, server.Options{Logger: log, NoSync: *noSync})
	if err != nil {
		return err
	}
	ln, passed, err := openListener(cfg.Listen, *listen != "")
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	if passed {
		log.Info("serving the socket the service manager passed (socket activation: devices that dial while termserver restarts wait for it)",
			"addr", ln.Addr().String(), "config_listen_ignored", cfg.Listen)
	}
	ctx, stop := stopOnSignal(log)
	defer stop()
	if *debugAddr != "" {
		dln, err := debugserver.Listen(*debugAddr)
		if err != nil {
			_ = ln.Close()
			_ = srv.Shutdown(context.Background())
			return err
		}
		debugCtx, stopDebug := context.WithCancel(ctx)
		defer stopDebug()
		go debugserver.Serve(debugCtx, dln, log)
	}
	scheme := "ws://"
	if srv.TLSEnabled() {
		scheme = "wss://"
	}
	// A quiet server gives back the heap a connect burst or the heartbeats'
	// garbage left beyond what is live (internal/memtrim): idle devices
	// cost their live memory, not twice it.
	go (&memtrim.Trimmer{}).Run(ctx)
	reloadOnHUP(ctx, srv, log, *cfgPath) // never fatal: without TLS it says there is nothing to reload
	for id, ch := range cfg.Channels {
		if ch.Enabled {
			log.Info("channel ready", "channel", id, "url", scheme+ln.Addr().String()+"/api/channels/"+id+"/ws", "agent", ch.Agent)
		}
	}
	ws, err := filepath.Abs(cfg.Workspace)
	if err != nil {
		ws = cfg.Workspace
	}
	log.Info("termserver listening", "addr", ln.Addr().String(), "workspace", ws, "version", buildinfo.Read(version).Version)
	err = srv.Serve(ctx, ln, *grace)
	log.Info("termserver stopped")
	return err
}

// openListener is the server's listening socket: the one the service manager
// passed (systemd's termserver.socket, package sdlisten; passed is true)
// or a new one on addr. A passed socket and a --listen flag (flagged) are
// two answers to one question: an error says to drop one.
func openListener(addr string, flagged bool) (ln net.Listener, passed bool, err error) {
	lns, err := sdlisten.Listeners()
	if err != nil {
		return nil, false, err
	}
	switch {
	case len(lns) == 1 && flagged:
		lns[0].Close()
		return nil, false, fmt.Errorf("--listen %s and a socket passed by the service manager (LISTEN_FDS): give one; with termserver.socket, drop --listen", addr)
	case len(lns) == 1:
		return lns[0].Listener, true, nil
	case len(lns) > 1:
		for _, l := range lns {
			l.Close()
		}
		return nil, false, fmt.Errorf("socket activation passed %d sockets; termserver serves one (one ListenStream= in termserver.socket)", len(lns))
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, false, nil
}

// stopOnSignal returns a context that ends at the first SIGINT or
// SIGTERM, saying which in the log; stop stops taking them.
func stopOnSignal(log *slog.Logger) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			log.Info("termserver stopping", "signal", sig.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}
