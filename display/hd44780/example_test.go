package hd44780_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/lcdemu"
)

func ExampleNew() {
	// On a Raspberry Pi the bus comes from periph's host drivers:
	//
	//	if _, err := host.Init(); err != nil { ... }
	//	bus, err := i2creg.Open("")
	//
	// Here it is the emulator, so the example runs anywhere.
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 2, Cols: 16})
	if err != nil {
		log.Fatal(err)
	}
	noWait := func(time.Duration) {} // the emulator needs no waits
	dev, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 2, Cols: 16, Sleep: noWait})
	if err != nil {
		log.Fatal(err)
	}
	f := display.NewFrame(dev.Size())
	f.SetLine(0, "Hello,")
	f.SetLine(1, "world!")
	if err := dev.Draw(context.Background(), f); err != nil {
		log.Fatal(err)
	}
	fmt.Println(bus.Render())
	// Output:
	// ┌────────────────┐
	// │Hello,          │
	// │world!          │
	// └────────────────┘
	// backlight on, display on
}

func ExampleDev_Draw() {
	bus, _ := lcdemu.New(&lcdemu.Opts{Rows: 2, Cols: 16})
	dev, err := hd44780.New(bus, 0x27, &hd44780.Opts{Sleep: func(time.Duration) {}})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	f := display.NewFrame(dev.Size())
	f.SetLines([]string{"Temp: 21°C", "Link: up"})
	if err := dev.Draw(ctx, f); err != nil {
		log.Fatal(err)
	}
	// Only the changed characters go out: one transaction.
	bus.ResetStats()
	f.SetLine(0, "Temp: 22°C")
	if err := dev.Draw(ctx, f); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("|%s| %d transaction, %d bytes\n", bus.Text()[0], bus.Stats().Tx, bus.Stats().WriteBytes)
	// Output:
	// |Temp: 22ﾟC      | 1 transaction, 8 bytes
}

func ExampleDev_DefineGlyph() {
	bus, _ := lcdemu.New(&lcdemu.Opts{Rows: 2, Cols: 16})
	dev, err := hd44780.New(bus, 0x27, &hd44780.Opts{Sleep: func(time.Duration) {}})
	if err != nil {
		log.Fatal(err)
	}
	// A link-up glyph on a private-use rune; CGRAM slots are assigned when a
	// frame first shows it.
	const linkUp = '\uE000'
	if err := dev.DefineGlyph(linkUp, display.Glyph{0x00, 0x0E, 0x11, 0x04, 0x0A, 0x00, 0x04, 0x00}); err != nil {
		log.Fatal(err)
	}
	f := display.NewFrame(dev.Size())
	f.SetLine(0, "Connected ")
	f.Set(0, 10, linkUp)
	if err := dev.Draw(context.Background(), f); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("|%s|\n", bus.Text()[0])
	// Output:
	// |Connected ⓪     |
}

func ExampleNewGPIO() {
	// With periph's host drivers on a Raspberry Pi:
	//
	//	rs, en := gpioreg.ByName("GPIO25"), gpioreg.ByName("GPIO24")
	//	d4, d5 := gpioreg.ByName("GPIO23"), gpioreg.ByName("GPIO17")
	//	d6, d7 := gpioreg.ByName("GPIO18"), gpioreg.ByName("GPIO22")
	//	dev, err := hd44780.NewGPIO(rs, en, d4, d5, d6, d7, &hd44780.Opts{Rows: 4, Cols: 20})
	//
	// R/W is tied to ground; Opts.Backlight is an optional backlight pin.
}
