package main

import (
	"context"
	"fmt"
	"time"

	"termlink/display/console"
	"termlink/testrig/demo"
)

// demo runs `termrig demo`: the server, its agent and a simulated device
// in this terminal.
func (a *app) demo(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("demo", "[--agent CMD] [--console] [--keypad] [--kiosk [--idle-seconds N] [--backlight-off-after N]] [--stream=false] [--workspace DIR]")
	var opt demo.Options
	fs.StringVar(&opt.Agent, "agent", "", "a Terminal Protocol v1 rich agent `command`, run in this directory (default: the built-in echo agent)")
	fs.BoolVar(&opt.Console, "console", false, "show the VT100 console device instead of the 20x4 LCD")
	fs.BoolVar(&opt.Keypad, "keypad", false, "the keyboard is a 4x4 keypad: 0-9 * # A-D with multi-tap letters")
	fs.BoolVar(&opt.Kiosk, "kiosk", false, "run the device as a kiosk: server notices, idle clock, backlight off; prints the web console URL and a curl line that sends a notice")
	idle := fs.Int("idle-seconds", int(demo.DefaultIdleAfter/time.Second), "with --kiosk: show the idle clock after `N` seconds without a key")
	dark := fs.Int("backlight-off-after", int(demo.DefaultBacklightOffAfter/time.Second), "with --kiosk: turn the backlight off after `N` seconds without a key")
	stream := fs.Bool("stream", true, "stream answers onto the device as the agent writes them (the echo agent writes word by word); --stream=false: answers arrive whole")
	fs.StringVar(&opt.Workspace, "workspace", "", "keep session logs, the outbox and demo.log in `DIR` (default: a temporary directory)")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	if opt.Console && opt.Keypad {
		return usagef("--console and --keypad exclude each other")
	}
	if opt.Console && opt.Kiosk {
		return usagef("--kiosk runs the LCD device: leave out --console")
	}
	if *idle <= 0 || *dark <= 0 {
		return usagef("--idle-seconds and --backlight-off-after must be positive")
	}
	opt.NoStream = !*stream
	opt.IdleAfter, opt.BacklightOffAfter = time.Duration(*idle)*time.Second, time.Duration(*dark)*time.Second
	tty, err := console.OpenTTY()
	if err != nil {
		return fmt.Errorf("the demo needs a terminal: %w", err)
	}
	defer tty.Close() // restores the terminal
	return demo.Run(ctx, opt, tty)
}
