// Command genglyphs writes server/console/static/glyphs.js from the
// console's glyph tables (go generate ./server/console).
package main

import (
	"log"
	"os"

	"termlink/server/console"
)

func main() {
	if err := os.WriteFile("static/glyphs.js", console.GlyphsJS(), 0o644); err != nil {
		log.Fatal(err)
	}
}
