// Command worker is a small termd for device/update's tests: run with
// --supervise it is the supervisor (update.Supervise); as the worker it
// holds a real link session to a termserver (reporting its version),
// says healthy after the first heartbeat, and applies the release named
// by STATE/apply.json when the test writes one. It prints what it does
// on stdout, one line each.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"termlink/device/update"
	"termlink/link"
	"termlink/release"
)

var version = "v0.0.0"

// request is apply.json.
type request struct {
	URL            string `json:"url"`
	Manifest       string `json:"manifest"` // the manifest file
	Key            string `json:"key"`      // the public key file
	AllowDowngrade bool   `json:"allow_downgrade"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	server := flag.String("server", "", "channel URL")
	state := flag.String("state-dir", "", "state dir")
	supervise := flag.Bool("supervise", false, "supervisor")
	gate := flag.Duration("gate", 20*time.Second, "health gate")
	showVersion := flag.Bool("version", false, "print the version")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	w := update.FromEnv()
	if *supervise && w == nil {
		cfg := update.Config{Args: os.Args[1:], StateDir: *state, Gate: *gate, StopTimeout: 5 * time.Second}
		if emu := os.Getenv("TERMLINK_EMULATOR"); emu != "" {
			// qemu-user does not follow an execve: the worker, an ARM
			// binary, runs under the emulator too.
			cfg.Command = func(name string, args ...string) *exec.Cmd {
				return exec.Command(emu, append([]string{name}, args...)...)
			}
			exe, err := filepath.Abs(os.Args[0])
			if err != nil {
				fmt.Println("supervisor:", err)
				os.Exit(1)
			}
			cfg.Exe = exe // os.Executable is the emulator's
		}
		err := update.Supervise(ctx, cfg)
		if ee, ok := err.(*update.ExitError); ok {
			os.Exit(ee.Code)
		}
		if err != nil {
			fmt.Println("supervisor:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Println("running", version)
	client, err := link.NewClient(link.ClientConfig{URL: *server, PeerID: "upd-1", Version: version, StateDir: *state,
		Heartbeat: time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Println("link:", err)
		os.Exit(1)
	}
	done := make(chan struct{})
	go func() { defer close(done); client.Run(ctx) }()
	go func() {
		for range client.Events() {
		}
	}()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	healthy := false
	for {
		select {
		case <-ctx.Done():
			<-done
			fmt.Println("stopped", version)
			return
		case <-t.C:
		}
		if !healthy && client.Stats().Pongs > 0 {
			healthy = true
			w.Healthy()
			fmt.Println("healthy", version)
		}
		path := filepath.Join(*state, "apply.json")
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		os.Remove(path)
		fmt.Println("apply:", apply(ctx, w, b))
	}
}

func apply(ctx context.Context, w *update.Worker, b []byte) error {
	var r request
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	mb, err := os.ReadFile(r.Manifest)
	if err != nil {
		return err
	}
	m, err := release.ParseManifest(mb)
	if err != nil {
		return err
	}
	key, err := release.LoadPublicKey(r.Key)
	if err != nil {
		return err
	}
	err = update.Apply(ctx, update.Options{URL: r.URL, Manifest: m, Key: key, Version: version,
		AllowDowngrade: r.AllowDowngrade, Worker: w})
	if err != nil {
		return err
	}
	return fmt.Errorf("ok")
}
