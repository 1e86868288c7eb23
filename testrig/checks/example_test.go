package checks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"termlink/testrig/checks"
	"termlink/testrig/lcdemu"
)

// Scanning a bus: here the LCD emulator, which answers at its address only.
// On a board the bus comes from periph (i2creg.Open("1") after host.Init).
func ExampleI2CScan() {
	bus, err := lcdemu.New(&lcdemu.Opts{Addr: 0x3F})
	if err != nil {
		panic(err)
	}
	r := checks.I2CScan(context.Background(), bus, checks.I2COptions{Bus: "/dev/i2c-1", Expect: []uint16{0x27}})
	fmt.Println(r.Status(), r.Summary)
	// Output:
	// FAIL nothing answers at 0x27 (PCF8574 LCD backpack) on /dev/i2c-1: an LCD backpack answers at 0x3f instead (set that address in the board profile or pass --addr)
}

// A check's Result renders as text for people and as JSON for scripts.
func ExampleResult() {
	bus, err := lcdemu.New(&lcdemu.Opts{Addr: 0x27})
	if err != nil {
		panic(err)
	}
	r := checks.I2CScan(context.Background(), bus, checks.I2COptions{Bus: "/dev/i2c-1", First: 0x20, Last: 0x2F})
	r.WriteText(os.Stdout)
	data, _ := json.Marshal(r)
	fmt.Println(string(data)[:119])
	// Output:
	// PASS i2c-scan: 1 device answers on /dev/i2c-1: 0x27 (PCF8574 LCD backpack)
	//        0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f
	//   20: -- -- -- -- -- -- -- 27 -- -- -- -- -- -- -- --
	//   devices    1
	//   addr_0x27  1
	// {"name":"i2c-scan","pass":true,"skipped":false,"summary":"1 device answers on /dev/i2c-1: 0x27 (PCF8574 LCD backpack)",
}
