// Command termrig is the termlink test rig. Each job is a subcommand:
//
//	termrig load --server URL --devices N --rate R --duration D   load generator
//	termrig chaos --listen ADDR --target ADDR [--schedule S]       fault-injecting TCP proxy
//	termrig demo [--agent CMD] [--console] [--keypad]              server + agent + simulated device
//
// Run `termrig help` for the list and `termrig <command> -h` for the flags
// of one command. Exit status: 0 success, 1 the command ran and found a
// failure, 2 bad usage, 3 selftest found no failure but skipped checks
// for lack of a jumper, wired pins, a person or a server (INCOMPLETE).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"termlink/internal/buildinfo"
)

// version is termrig's version; release builds set it with
// -ldflags "-X main.version=v1.2.3" (make pi does).
var version = ""

// subcommand is one `termrig <name>` job.
type subcommand struct {
	summary string
	run     func(ctx context.Context, args []string) error
	subs    []subSummary // `termrig <name> <sub>`, for the help
}

// subSummary is one `termrig <command> <name>` in the help.
type subSummary struct{ name, summary string }

// app holds what subcommands write to.
type app struct {
	stdout, stderr io.Writer
}

// subcommands lists every command; adding one (demo, chaos, selftest) is
// one entry here and one method.
func (a *app) subcommands() map[string]subcommand {
	return map[string]subcommand{
		"load":  {"simulate N terminal devices against a channel; report latency, loss, duplicates", a.load, nil},
		"chaos": {"TCP proxy that adds latency, cuts, refuses or stalls connections, by schedule or HTTP", a.chaos, nil},
		"demo":  {"the server, an agent and a simulated LCD device in this terminal", a.demo, nil},
		// Bring-up checks (checks.go); --sim runs each on the simulated rig.
		"serial-loopback": {"serial port with TX wired to RX: bytes back, corrupted, throughput per baud", a.serialLoopback, nil},
		"i2c-scan":        {"list the I2C addresses that answer, with the likely part", a.i2cScan, nil},
		"lcd-test":        {"HD44780 LCD patterns (pixels, ROM pages, custom chars, cursor), fps, I2C errors", a.lcdTest, nil},
		"gpio-loopback":   {"two GPIO pins wired together: edges seen, latency p50/p99", a.gpioLoopback, nil},
		"keypad-test":     {"press every key once: table of keys seen, stuck keys, ghosting", a.keypadTest, nil},
		"link-test":       {"connect to a server: ping p50/p99, message round trip, token/TLS errors explained", a.linkTest, nil},
		"enroll-test":     {"enrollment by pairing code against a server: code, approval, token, a message", a.enrollTest, nil},
		"selftest":        {"every check that applies to a board, as a pass/fail table (--sim: no hardware)", a.selftest, nil},
		"release":         {"signed termd releases, and their staged rollouts to a channel's devices", a.release, releaseSummaries},
		"device":          {"a channel's devices through termserver's operator API", a.device, deviceSummaries},
		"cluster":         {"a local NATS JetStream cluster plus termserver edges and workers on loopback; prints their URLs", a.cluster, nil},
	}
}

// usageError is an error in how a command was called: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitStatus ends a command whose outcome it has printed already: run
// exits with the status and prints nothing more.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// Exit statuses of a command that printed its own verdict.
const (
	exitFailed     exitStatus = 1 // a check failed
	exitIncomplete exitStatus = 3 // selftest: nothing failed, checks skipped
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills the process
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	cmds := a.subcommands()
	if len(args) == 0 {
		printUsage(stderr, cmds)
		return 2
	}
	name := args[0]
	switch name {
	case "version", "-version", "--version":
		fmt.Fprint(stdout, buildinfo.Read(version).String("termrig"))
		return 0
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if cmd, ok := cmds[args[1]]; ok {
				cmd.run(ctx, []string{"-h"})
				return 0
			}
			fmt.Fprintf(stderr, "termrig: unknown command %q\nRun 'termrig help' for the list of commands.\n", args[1])
			return 2
		}
		printUsage(stdout, cmds)
		return 0
	}
	cmd, ok := cmds[name]
	if !ok {
		fmt.Fprintf(stderr, "termrig: unknown command %q\nRun 'termrig help' for the list of commands.\n", name)
		return 2
	}
	err := cmd.run(ctx, args[1:])
	var ue usageError
	var es exitStatus
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &es):
		return int(es)
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "termrig %s: %v\nRun 'termrig %s -h' for usage.\n", name, err, name)
		return 2
	default:
		fmt.Fprintf(stderr, "termrig %s: %v\n", name, err)
		return 1
	}
}

func printUsage(w io.Writer, cmds map[string]subcommand) {
	fmt.Fprint(w, "termrig is the termlink test rig.\n\nUsage:\n\n\ttermrig <command> [flags]\n\nCommands:\n\n")
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		fmt.Fprintf(w, "\t%-16s %s\n", name, cmds[name].summary)
		for _, sub := range cmds[name].subs {
			fmt.Fprintf(w, "\t  %-14s %s\n", sub.name, sub.summary)
		}
	}
	fmt.Fprint(w, "\nThe fleet commands (release rollout, status, pause, resume, abort; device settings, logs,\n"+
		"selftest) act on the channel given by --channel; without it, on the server's only channel, or\n"+
		"the one that holds the devices named. Run 'termrig <command> -h' for the flags of a command,\n"+
		"'termrig <command> <subcommand> -h' for one of its subcommands, 'termrig --version' for the version.\n")
}

// newFlagSet returns a FlagSet that prints nothing itself, and the
// function that prints its usage to stdout. Parse errors are returned for
// run to print.
func (a *app) newFlagSet(name, synopsis string) (*flag.FlagSet, func()) {
	fs := flag.NewFlagSet("termrig "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	usage := func() {
		fmt.Fprintf(a.stdout, "Usage: termrig %s %s\n\nFlags (one or two dashes):\n", name, synopsis)
		fs.SetOutput(a.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs, usage
}

// parse parses args into fs; -h prints usage and returns flag.ErrHelp.
func parse(fs *flag.FlagSet, usage func(), args []string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	case err != nil:
		return usageError{err}
	case fs.NArg() > 0:
		return usagef("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return nil
}

// Flag values whose parse errors say what is expected (the flag package
// only says "parse error").

type intFlag struct{ p *int }

func (f intFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.Itoa(*f.p)
}

func (f intFlag) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("must be a whole number")
	}
	*f.p = v
	return nil
}

type floatFlag struct{ p *float64 }

func (f floatFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f floatFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return errors.New("must be a number")
	}
	*f.p = v
	return nil
}

type durationFlag struct{ p *time.Duration }

func (f durationFlag) String() string {
	if f.p == nil {
		return "0s"
	}
	return f.p.String()
}

func (f durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("must be a duration with a unit, like 500ms, 10s or 2m (%v)", err)
	}
	*f.p = v
	return nil
}
