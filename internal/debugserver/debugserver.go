// Package debugserver serves net/http/pprof for the commands' --debug-addr
// flag (termserver, termrig cluster), on loopback only: a profile shows a
// process's internals and costs it CPU, so a typo never exposes it on the
// network.
package debugserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Listen opens the --debug-addr listener. Only loopback addresses are
// taken; a bare ":PORT" means 127.0.0.1:PORT.
func Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-addr %q: want HOST:PORT (e.g. 127.0.0.1:6060): %v", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("--debug-addr %q: must be a loopback address (127.0.0.1, ::1 or localhost): the profiler is not for the network", addr)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("--debug-addr: %w", err)
	}
	return ln, nil
}

// Mux serves the profiles under /debug/pprof/.
func Mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Serve serves Mux on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, log *slog.Logger) {
	srv := &http.Server{Handler: Mux(), ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	log.Info("debug server listening (pprof)", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("debug server stopped", "err", err)
	}
}
