package link_test

import (
	"context"
	"fmt"
	"log"

	"termlink/link"
)

// A device session: messages typed on the keypad go to Send (they are on
// disk when it returns), the screen follows Events, and each final answer
// is confirmed with Delivered once it is shown.
func ExampleClient() {
	c, err := link.NewClient(link.ClientConfig{
		URL:        "ws://127.0.0.1:8080/api/channels/terminal-dev/ws",
		PeerID:     "device-001",
		DeviceName: "desk-terminal",
		StateDir:   "/var/lib/termd",
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	go c.Run(ctx) // reconnects by itself until Close

	if _, err := c.Send(ctx, "hello"); err != nil {
		log.Fatal(err)
	}
	for e := range c.Events() {
		switch e.Kind {
		case link.EventState:
			fmt.Println("link:", e) // "state waiting until 10:00:03.250: dial: ..."
		case link.EventReply:
			fmt.Println(e.Reply.Text)
			// Shown: now the message may leave the outbox.
			if err := c.Delivered(e.MessageID); err != nil {
				log.Print(err)
			}
			c.Close()
		}
	}
}
