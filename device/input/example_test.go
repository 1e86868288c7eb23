package input_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/host/v3"

	"termlink/device/input"
)

// Scanning a 4x4 keypad on a Raspberry Pi and typing with multi-tap.
func Example() {
	if _, err := host.Init(); err != nil {
		log.Fatal(err)
	}
	var rows []gpio.PinOut
	var cols []gpio.PinIn
	for _, n := range []string{"GPIO5", "GPIO6", "GPIO13", "GPIO19"} {
		rows = append(rows, gpioreg.ByName(n))
	}
	for _, n := range []string{"GPIO12", "GPIO16", "GPIO20", "GPIO21"} {
		cols = append(cols, gpioreg.ByName(n))
	}
	kp, err := input.New(rows, cols, input.Opts{Keymap: input.Keymap4x4()})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	go kp.Run(ctx)
	actions := make(chan input.Action)
	go input.Drive(ctx, kp.Events(), input.NewMultiTap(input.MultiTapOpts{}), actions)
	for a := range actions {
		if a.Kind == input.Send {
			fmt.Println("send:", a.Text)
		}
	}
}

func ExampleMultiTap() {
	mt := input.NewMultiTap(input.MultiTapOpts{})
	now := time.Unix(0, 0)
	press := func(keys string) {
		for _, k := range keys {
			mt.Handle(input.Event{Kind: input.KeyDown, Key: k, Time: now})
			mt.Handle(input.Event{Kind: input.KeyUp, Key: k, Time: now})
			now = now.Add(200 * time.Millisecond)
		}
	}
	press("44")
	now = now.Add(time.Second) // pause: 'h' is committed
	press("444")
	press("#") // send
	fmt.Println(mt.Text() == "")
	press("*44")
	fmt.Println(mt.Text(), mt.Mode())
	// Output:
	// true
	// H ABC
}
