// Command hang is a release that starts and never becomes healthy: it
// waits for a signal (the health gate's timer must catch it).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	<-c
}
