package display_test

import (
	"fmt"

	"termlink/display"
)

func ExampleLayout() {
	// A reply from an agent, laid out for a 16x2 LCD with ROM A00.
	pages := display.Layout(display.A00, "Café “Zum Löwen” — 21°C, sunny… see you at 5!", 2, 16)
	for i, page := range pages {
		fmt.Printf("page %d\n", i+1)
		for _, line := range page {
			fmt.Printf("|%-16s|\n", line)
		}
	}
	// Output:
	// page 1
	// |Cafe "Zum Löwen"|
	// |- 21°C, sunny...|
	// page 2
	// |see you at 5!   |
}

func ExampleFold() {
	fmt.Println(display.Fold(display.A00, "Straße → 5 €"))
	fmt.Println(display.Fold(display.A02, "Straße → 5 €"))
	fmt.Println(display.Fold(display.A00, "ok 👍"))
	// Output:
	// Strasse → 5 EUR
	// Straße → 5 EUR
	// ok ?
}

func ExampleDiff() {
	prev := display.NewFrame(2, 8)
	prev.SetLines([]string{"12:00", "idle"})
	next := prev.Clone()
	next.SetLine(0, "12:01")
	next.SetLine(1, "busy")
	for _, r := range display.Diff(prev, next, 1) {
		fmt.Printf("row %d col %d: %q\n", r.Row, r.Col, string(next.Row(r.Row)[r.Col:r.Col+r.Len]))
	}
	// Output:
	// row 0 col 4: "1"
	// row 1 col 0: "busy"
}

func ExampleROM_Code() {
	for _, r := range "A¥°ｱé" {
		a00, ok00 := display.A00.Code(r)
		a02, ok02 := display.A02.Code(r)
		fmt.Printf("%c A00 %#02x %v, A02 %#02x %v\n", r, a00, ok00, a02, ok02)
	}
	// Output:
	// A A00 0x41 true, A02 0x41 true
	// ¥ A00 0x5c true, A02 0xa5 true
	// ° A00 0xdf true, A02 0xb0 true
	// ｱ A00 0xb1 true, A02 0x00 false
	// é A00 0x00 false, A02 0xe9 true
}
