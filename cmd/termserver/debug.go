package main

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

// debugListen opens the --debug-addr listener. Only loopback addresses are
// taken: pprof shows the server's internals and can cost it CPU, so it is
// never exposed on the network by a typo. A bare ":PORT" means
// 127.0.0.1:PORT.
func debugListen(addr string) (net.Listener, error) {
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

// serveDebug serves net/http/pprof on ln until ctx ends.
func serveDebug(ctx context.Context, ln net.Listener, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("debug server listening (pprof)", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("debug server stopped", "err", err)
	}
}
