package main

import (
	"flag"
	"fmt"
)

// usageHead is what `termd --help` says before the flags.
const usageHead = `termd is the terminal device daemon: it shows a chat with a termserver
agent on a board's character LCD and keypad (or a serial console, or this
terminal with --board sim), and holds one persistent session to the server.

Example:

	termd --server ws://192.168.1.10:8080/api/channels/terminal-dev/ws --board rpi-lcd2004-i2c

Usage: termd --server URL [--board NAME | --board-file FILE] [flags]

Flags:
`

// printUsage prints the help: what termd is, an example, the flags.
func printUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), usageHead)
	fs.PrintDefaults()
}
