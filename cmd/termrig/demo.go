package main

import (
	"context"
	"fmt"

	"termlink/display/console"
	"termlink/testrig/demo"
)

// demo runs `termrig demo`: the server, its agent and a simulated device
// in this terminal.
func (a *app) demo(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("demo", "[--agent CMD] [--console] [--keypad] [--workspace DIR]")
	var opt demo.Options
	fs.StringVar(&opt.Agent, "agent", "", "a Terminal Protocol v1 rich agent `command`, run in this directory (default: the built-in echo agent)")
	fs.BoolVar(&opt.Console, "console", false, "show the VT100 console device instead of the 20x4 LCD")
	fs.BoolVar(&opt.Keypad, "keypad", false, "the keyboard is a 4x4 keypad: 0-9 * # A-D with multi-tap letters")
	fs.StringVar(&opt.Workspace, "workspace", "", "keep session logs, the outbox and demo.log in `DIR` (default: a temporary directory)")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	if opt.Console && opt.Keypad {
		return usagef("--console and --keypad exclude each other")
	}
	tty, err := console.OpenTTY()
	if err != nil {
		return fmt.Errorf("the demo needs a terminal: %w", err)
	}
	defer tty.Close() // restores the terminal
	return demo.Run(ctx, opt, tty)
}
