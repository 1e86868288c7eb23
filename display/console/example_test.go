package console_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"syscall"

	"termlink/display/console"
)

// A chat screen on this process's terminal.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	tty, err := console.OpenTTY()
	if err != nil {
		log.Fatal(err)
	}
	defer tty.Close()
	c := console.New(tty, console.Opts{})
	defer c.Close()
	go c.Run(ctx)

	c.SetStatus("connected")
	for ev := range c.Events() {
		switch ev.Kind {
		case console.Submit:
			c.AddMessage(console.RoleUser, ev.Text)
			c.AddMessage(console.RoleAssistant, "you said: "+ev.Text)
		case console.Interrupt, console.EOF:
			return
		}
	}
}

// A chat screen on a serial terminal (picocom -b 115200 /dev/ttyUSB0 on
// the other end) that survives the USB adapter being unplugged.
func ExampleOpenSerial() {
	ctx := context.Background()
	port, err := console.OpenSerial(ctx, "/dev/serial0", 115200)
	if err != nil {
		log.Fatal(err)
	}
	defer port.Close()
	c := console.New(port, console.Opts{}) // size asked with ESC [ 6 n
	defer c.Close()
	go c.Run(ctx)
	c.SetStatus("offline: retry in 7s")
	fmt.Println(<-c.Events())
}

func ExampleDecoder() {
	var d console.Decoder
	// An arrow key and a UTF-8 character split across two reads.
	keys := d.Decode(nil, []byte("\x1b[Dh\xc3"))
	keys = d.Decode(keys, []byte("\xa9\r\n"))
	fmt.Println(keys)
	// Output: [Left 'h' 'é' Enter]
}
