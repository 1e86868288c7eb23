package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"termlink/testrig/chaos"
)

const chaosSynopsis = `--listen ADDR --target ADDR [--schedule S [--repeat D]] [--control ADDR] [flags]

A fault-injecting TCP proxy: devices connect to --listen, every connection
is forwarded to --target, and the link misbehaves on command:

  normal         forward everything (and clear the latency)
  latency=D      deliver every chunk D late, each way
  stall          keep sockets open, pass nothing (a half-open link)
  refuse         reset new connections; open ones stay
  cut            reset every open connection now
  down           cut, then refuse

--schedule switches at offsets from the start, e.g.
"5s:cut,10s:stall,15s:normal"; --repeat D runs it again every D.
--control ADDR serves a small HTTP API: GET /status, POST /mode?m=stall,
POST /cut, POST /latency?d=200ms. Runs until Ctrl-C, then prints counters.`

// chaos is `termrig chaos`.
func (a *app) chaos(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("chaos", chaosSynopsis)
	listen := fs.String("listen", "127.0.0.1:8081", "`address` devices connect to")
	target := fs.String("target", "", "`address` of the server (host:port, required)")
	schedule := fs.String("schedule", "", "`steps` OFFSET:ACTION,... e.g. 5s:cut,10s:stall,15s:normal")
	var repeat, latency time.Duration
	fs.Var(durationFlag{&repeat}, "repeat", "run the schedule again every `D` (0: once)")
	fs.Var(durationFlag{&latency}, "latency", "start with latency `D` each way")
	start := fs.String("mode", "normal", "`action` to start with (normal, stall, refuse, latency=D)")
	control := fs.String("control", "", "serve the HTTP control API on `address`")
	verbose := fs.Bool("v", false, "log every mode change and cut to stderr")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	switch {
	case *target == "":
		return usagef("--target is required (e.g. --target 127.0.0.1:8080)")
	case repeat != 0 && *schedule == "":
		return usagef("--repeat needs a --schedule")
	case latency < 0:
		return usagef("--latency must not be negative, got %v", latency)
	}
	if _, _, err := net.SplitHostPort(*target); err != nil {
		return usagef("--target %q: want host:port", *target)
	}
	first, err := chaos.ParseAction(*start)
	if err != nil {
		return usagef("--mode: %v", err)
	}
	var sched chaos.Schedule
	if *schedule != "" {
		if sched, err = chaos.ParseSchedule(*schedule, repeat); err != nil {
			return usagef("--schedule: %v", err)
		}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	out := &lockedWriter{w: a.stdout}
	p, err := chaos.New(chaos.Options{Listen: *listen, Target: *target,
		Logger: slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))})
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Apply(first); err != nil {
		return err
	}
	if latency > 0 {
		p.SetLatency(latency)
	}
	out.printf("chaos: proxying %s -> %s (mode %s, latency %v)\n", p.Addr(), *target, p.Mode(), p.Latency())

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *control != "" {
		ln, err := net.Listen("tcp", *control)
		if err != nil {
			return fmt.Errorf("control API: %w", err)
		}
		hs := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				out.printf("chaos: control API: %v\n", err)
			}
		}()
		defer hs.Close()
		out.printf("chaos: control API on http://%s (GET /status, POST /mode?m=ACTION, POST /cut, POST /latency?d=D)\n", ln.Addr())
	}
	if len(sched.Steps) > 0 {
		began := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.RunSchedule(ctx, sched, func(s chaos.Step) {
				out.printf("chaos: %s %s (open connections %d)\n", time.Since(began).Round(time.Millisecond), s.Action, p.Stats().Active)
			})
		}()
	}
	<-ctx.Done()
	st := p.Stats()
	out.printf("chaos: stopped: accepted %d, refused %d, cut %d, bytes up %d, down %d\n",
		st.Accepted, st.Refused, st.Cut, st.BytesUp, st.BytesDown)
	return nil
}

// lockedWriter serializes the lines of the schedule and the main goroutine.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) printf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, a...)
}
