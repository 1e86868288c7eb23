package boards_test

import (
	"fmt"
	"log"

	"termlink/boards"
)

func ExampleLoad() {
	p, err := boards.Load("rpi-lcd2004-i2c")
	if err != nil {
		log.Fatal(err)
	}
	d := p.Display
	fmt.Println(d.Kind, d.Cols, "x", d.Rows, "bus", d.Bus, "address", d.Address, "ROM", d.ROM)
	fmt.Println(p.Keypad.Kind, p.Keypad.Keymap)
	// Output:
	// hd44780-i2c 20 x 4 bus 1 address 0x27 ROM A00
	// 4x4 [123A 456B 789C *0#D]
}

func ExampleParse() {
	_, err := boards.Parse("rpi-lcd2004-i2c.json", []byte(`{
		"display": {"kind": "hd44780-i2c", "rows": 4, "cols": 20, "bus": "1", "address": "0x50"}
	}`))
	fmt.Println(err)
	// Output: rpi-lcd2004-i2c.json: display.address: 0x50 is not a PCF8574 address (0x20-0x27, 0x38-0x3F)
}
