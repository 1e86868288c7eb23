// Command mqttpeer is the MQTT side of testrig/bench/peers.sh: the job
// termrig load gives termserver (each device's message answered "You
// said: ..."), done by an MQTT broker with a small responder.
//
//	mqttpeer respond --broker HOST:PORT [--conns N]
//	    subscribes to every device's request topic (dev/+/req; with
//	    several connections a shared subscription) at QoS 1 and answers
//	    each request on the device's reply topic (dev/ID/rep) at QoS 1,
//	    with the paho client. Prints "ready" on stdout once subscribed;
//	    runs until SIGINT/SIGTERM or the broker goes away.
//	mqttpeer load --broker HOST:PORT [--devices N] [--rate R] [--duration D]
//	    [--drain D] [--hold] [--connect-rate R] [--peer-prefix P]
//	    [--server-pid PID,PID] [--keepalive 5s] [--json]
//	    termrig load's lean devices over MQTT (see load.go); the report
//	    has termrig load's JSON names for the figures both have.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mqttpeer:", err)
		os.Exit(1)
	}
}

const usage = "usage: mqttpeer respond|load [flags] (-h for the flags)"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	switch args[0] {
	case "respond":
		o, err := parseRespond(args[1:])
		if err != nil {
			return err
		}
		return respond(ctx, o, log, func() { fmt.Fprintln(stdout, "ready") })
	case "load":
		o, err := parseLoad(args[1:])
		if err != nil {
			return err
		}
		rep, err := runLoad(ctx, o, log, stdout)
		if err != nil {
			return err
		}
		if o.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		rep.text(stdout)
		return nil
	default:
		return fmt.Errorf("unknown command %q; %s", args[0], usage)
	}
}
