package boards

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"termlink/internal/keymap"
)

func TestNames(t *testing.T) {
	want := []string{"lcdproc", "rpi-lcd1602-gpio", "rpi-lcd1602-i2c", "rpi-lcd2004-i2c", "rpi-serial-console", "sim", "sim-lcd"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
}

func TestEmbeddedProfilesLoad(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if p.Name != name || p.Description == "" {
				t.Errorf("name %q description %q", p.Name, p.Description)
			}
			if err := p.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			// What Load returns marshals back to a profile that loads the
			// same.
			data, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			p2, err := Parse(name+".json", data)
			if err != nil {
				t.Fatalf("re-parse: %v\n%s", err, data)
			}
			if !reflect.DeepEqual(p, p2) {
				t.Errorf("round trip differs:\n%+v\n%+v", p, p2)
			}
			if k := p.Keypad; k != nil {
				km, err := k.Layout()
				if err != nil {
					t.Fatalf("keymap: %v", err)
				}
				if r, c := km.Size(); r != len(k.Rows) || c != len(k.Cols) {
					t.Errorf("keymap %dx%d for %d rows %d cols", r, c, len(k.Rows), len(k.Cols))
				}
			}
		})
	}
}

func TestEmbeddedProfileContents(t *testing.T) {
	load := func(name string) *Profile {
		t.Helper()
		p, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	sim := load("sim")
	if sim.Display.Kind != Console || sim.Serial != nil || sim.Keypad != nil {
		t.Errorf("sim: %+v", sim)
	}
	sc := load("rpi-serial-console")
	if sc.Display.Kind != Console || sc.Serial == nil || sc.Serial.Port != "/dev/serial0" || sc.Serial.Baud != 115200 {
		t.Errorf("rpi-serial-console: %+v %+v", sc.Display, sc.Serial)
	}
	for name, size := range map[string][2]int{"rpi-lcd1602-i2c": {2, 16}, "rpi-lcd2004-i2c": {4, 20}} {
		p := load(name)
		d := p.Display
		if d.Kind != HD44780I2C || d.Rows != size[0] || d.Cols != size[1] || d.Bus != "1" || d.Address.I2C != 0x27 ||
			d.ROM != "A00" || d.Backlight == nil || !*d.Backlight {
			t.Errorf("%s display: %+v", name, d)
		}
		k := p.Keypad
		if k == nil || k.Kind != Keypad4x4 || k.Mode != "multitap" {
			t.Fatalf("%s keypad: %+v", name, k)
		}
		if got := k.EntryKeys(); got != keymap.Keys4x4() {
			t.Errorf("%s keys %+v", name, got)
		}
	}
	g := load("rpi-lcd1602-gpio")
	if g.Display.Kind != HD44780GPIO || g.Display.Pins == nil || g.Display.Pins.RS != "GPIO25" || g.Display.Pins.D7 != "GPIO22" {
		t.Errorf("gpio display %+v", g.Display)
	}
	if g.Keypad.Kind != Keypad3x4 || g.Keypad.EntryKeys() != keymap.Keys3x4() {
		t.Errorf("gpio keypad %+v", g.Keypad)
	}
	l := load("rpi-lcd1602-i2c")
	if k := l.Keypad; time.Duration(k.Debounce) != 20*time.Millisecond || time.Duration(k.RepeatDelay) != 500*time.Millisecond ||
		k.RepeatInterval() != time.Second/15 {
		t.Errorf("timing %+v", k)
	}
}

func TestLoadUnknown(t *testing.T) {
	for _, name := range []string{"nope", "../boards/sim", "", "SIM"} {
		_, err := Load(name)
		if err == nil || !strings.Contains(err.Error(), "unknown board") || !strings.Contains(err.Error(), "rpi-lcd2004-i2c") {
			t.Errorf("Load(%q) = %v, want unknown board with the list", name, err)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "my-board.json")
	os.WriteFile(file, []byte(`{"display": {"kind": "console"}, "console": {"cols": 100, "rows": 30}}`), 0o600)
	p, err := LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "my-board" || p.Console.Cols != 100 || p.Console.Rows != 30 {
		t.Fatalf("%+v", p)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, []byte(`{"description": "`+strings.Repeat("x", maxProfileSize)+`"}`), 0o600)
	if _, err := LoadFile(big); err == nil || !strings.Contains(err.Error(), "big.json: larger than") {
		t.Errorf("big file: %v", err)
	}
	bad := filepath.Join(dir, "rpi-lcd2004-i2c.json")
	os.WriteFile(bad, []byte(`{"display": {"kind": "hd44780-i2c", "rows": 4, "cols": 20, "bus": "1", "address": "0x50"}}`), 0o600)
	_, err = LoadFile(bad)
	if err == nil || err.Error() != "rpi-lcd2004-i2c.json: display.address: 0x50 is not a PCF8574 address (0x20-0x27, 0x38-0x3F)" {
		t.Errorf("bad address: %v", err)
	}
}

// The README's way to a custom board: copy an embedded profile, edit it,
// load it by path. The copy keeps the name it was copied with.
func TestLoadFileEditedCopy(t *testing.T) {
	data, err := profiles.ReadFile("profiles/rpi-lcd2004-i2c.json")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), `"0x27"`, `"0x3F"`, 1)
	if edited == string(data) {
		t.Fatalf("the profile has no address 0x27 to edit:\n%s", data)
	}
	file := filepath.Join(t.TempDir(), "my-board.json")
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadFile(file)
	if err != nil {
		t.Fatalf("LoadFile(my-board.json), a copy of rpi-lcd2004-i2c: %v", err)
	}
	if p.Display.Address.I2C != 0x3F || p.Name != "rpi-lcd2004-i2c" {
		t.Fatalf("loaded %q at %#x, want rpi-lcd2004-i2c at 0x3f", p.Name, p.Display.Address)
	}
}

const lcd = `"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": "0x27"}`
const kp4 = `"kind": "4x4", "rows": ["GPIO5", "GPIO6", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO16", "GPIO20", "GPIO21"]`

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name, json string
		path, want string // the first FieldError's path and a part of the whole message
	}{
		{"syntax", "{\n  \"display\": {,}\n}", "", "line 2, column 15: invalid character ','"},
		{"empty", "", "", "unexpected end of JSON"},
		{"truncated", `{"display": {"kind": "console"`, "", "unexpected end of JSON"},
		{"trailing data", `{"display": {"kind": "console"}} {}`, "", "unexpected data after the top-level object"},
		{"not an object", `[]`, "", "want an object, got an array"},
		{"unknown field", `{"displya": {}}`, "displya", "unknown field (known: console, description, display, keypad, kiosk, name, serial)"},
		{"unknown nested field", `{"display": {"kind": "console", "colour": "red"}}`, "display.colour", "unknown field"},
		{"duplicate field", `{"display": {"kind": "console", "kind": "console"}}`, "display.kind", "given twice"},
		{"duplicate camelCase", `{` + lcd + `, "keypad": {` + kp4 + `, "keys": {"scroll_up": "A", "scrollUp": "A"}}}`, "keypad.keys.scrollUp", `given twice (also as "scroll_up")`},
		{"duplicate map key", `{` + lcd + `, "keypad": {` + kp4 + `, "mode": "kiosk", "phrases": {"1": "a", "1": "b"}}}`, "keypad.phrases.1", "given twice"},
		{"wrong type", `{"display": {"kind": "hd44780-i2c", "rows": "2"}}`, "display.rows", "want an integer, got a string"},
		{"fraction", `{"display": {"kind": "hd44780-i2c", "rows": 2.5}}`, "display.rows", "want an integer, got 2.5"},
		{"bool", `{"display": {"kind": "hd44780-i2c", "backlight": "yes"}}`, "display.backlight", "want true or false"},
		{"kind missing", `{"display": {}}`, "display.kind", `required: one of "hd44780-i2c", "hd44780-gpio", "console"`},
		{"lcdproc address", `{"display": {"kind": "lcdproc", "address": "0x27"}}`, "display.address", `LCDd's address is host:port`},
		{"lcdproc port", `{"display": {"kind": "lcdproc", "address": "localhost:99999"}}`, "display.address", "the port must be 1-65535"},
		{"lcdproc host", `{"display": {"kind": "lcdproc", "address": ":13666"}}`, "display.address", "want host:port"},
		{"lcdproc key label", `{"display": {"kind": "lcdproc", "keys": {"Up": "X"}}}`, "display.keys.Up", `key 'X' is not on the keypad (123A/456B/789C/*0#D)`},
		{"lcdproc key binding", `{"display": {"kind": "lcdproc", "keys": {"Up": "AB"}}}`, "display.keys.Up", `"AB": want one keypad key`},
		{"lcdproc key name", `{"display": {"kind": "lcdproc", "keys": {"Page Up": "A"}}}`, "display.keys.Page Up", "is not an LCDd key name"},
		{"lcdproc rom", `{"display": {"kind": "lcdproc", "rom": "A00"}}`, "display.rom", "LCDd's driver maps characters"},
		{"lcdproc bus", `{"display": {"kind": "lcdproc", "bus": "1"}}`, "display.bus", "only an hd44780-i2c display"},
		{"keys on console", `{"display": {"kind": "console", "keys": {"Up": "A"}}}`, "display.keys", "only an lcdproc display reports keys"},
		{"network address on i2c", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": "127.0.0.1:13666"}}`, "display.address", "is a network address"},
		{"lcdproc keypad 3x4 label", `{"display": {"kind": "lcdproc", "keys": {"Up": "A"}}, "keypad": {"kind": "3x4"}}`, "display.keys.Up", "not on the keypad (123/456/789/*0#)"},
		{"kind unknown", `{"display": {"kind": "oled"}}`, "display.kind", `"oled": want one of`},
		{"rows", `{"display": {"kind": "hd44780-i2c", "rows": 3, "cols": 16, "bus": "1", "address": 39}}`, "display.rows", "3: an HD44780 has 1, 2 or 4 rows"},
		{"rows missing", `{"display": {"kind": "hd44780-i2c", "cols": 16, "bus": "1", "address": 39}}`, "display.rows", "required"},
		{"cols", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 41, "bus": "1", "address": 39}}`, "display.cols", "41: an HD44780 has 8 to 40 columns"},
		{"40x4", `{"display": {"kind": "hd44780-i2c", "rows": 4, "cols": 40, "bus": "1", "address": 39}}`, "display.cols", "at most 20 columns"},
		{"rom", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": 39, "rom": "A01"}}`, "display.rom", `"A01": want "A00"`},
		{"address", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": "0x50"}}`, "display.address", "0x50 is not a PCF8574 address (0x20-0x27, 0x38-0x3F)"},
		{"address number", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": 80}}`, "display.address", "0x50 is not a PCF8574 address"},
		{"address text", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": "twenty"}}`, "display.address", `"twenty" is not an I2C address`},
		{"address 10-bit", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": 200}}`, "display.address", "0xc8 is not a 7-bit I2C address"},
		{"address missing", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1"}}`, "display.address", "required"},
		{"bus missing", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "address": 39}}`, "display.bus", "required"},
		{"pinmap incomplete", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": 39, "pinmap": {"rs": 0, "rw": 1, "en": 2, "bl": 3, "d4": 4, "d5": 5, "d6": 6}}}`, "display.pinmap.d7", "required"},
		{"pinmap bit", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": 39, "pinmap": {"rs": 0, "rw": 1, "en": 2, "bl": 3, "d4": 4, "d5": 5, "d6": 6, "d7": 8}}}`, "display.pinmap.d7", "8: a PCF8574 bit is 0-7"},
		{"pinmap twice", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": 39, "pinmap": {"rs": 0, "rw": 1, "en": 2, "bl": 3, "d4": 4, "d5": 5, "d6": 6, "d7": 6}}}`, "display.pinmap.d7", "bit 6 is already d6"},
		{"gpio pins missing", `{"display": {"kind": "hd44780-gpio", "rows": 2, "cols": 16}}`, "display.pins", "required"},
		{"gpio pin missing", `{"display": {"kind": "hd44780-gpio", "rows": 2, "cols": 16, "pins": {"rs": "GPIO25", "en": "GPIO24", "d4": "GPIO23", "d5": "GPIO17", "d6": "GPIO18"}}}`, "display.pins.d7", "required"},
		{"gpio pin twice", `{"display": {"kind": "hd44780-gpio", "rows": 2, "cols": 16, "pins": {"rs": "GPIO25", "en": "GPIO24", "d4": "GPIO23", "d5": "GPIO17", "d6": "GPIO18", "d7": "GPIO25"}}}`, "display.pins.d7", "GPIO25 is already used by display.pins.rs"},
		{"bus on gpio", `{"display": {"kind": "hd44780-gpio", "rows": 2, "cols": 16, "bus": "1", "pins": {"rs": "GPIO25", "en": "GPIO24", "d4": "GPIO23", "d5": "GPIO17", "d6": "GPIO18", "d7": "GPIO22"}}}`, "display.bus", "only an hd44780-i2c display"},
		{"pins on i2c", `{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": 39, "pins": {}}}`, "display.pins", "only an hd44780-gpio display"},
		{"console rows", `{"display": {"kind": "console", "rows": 24}}`, "display", "set console.cols and console.rows"},
		{"console rom", `{"display": {"kind": "console", "rom": "A00"}}`, "display.rom", "only an HD44780"},
		{"console size half", `{"display": {"kind": "console"}, "console": {"cols": 80}}`, "console", "give both cols and rows"},
		{"console size range", `{"display": {"kind": "console"}, "console": {"cols": 80, "rows": 2}}`, "console.rows", "2 is out of range"},
		{"console size on lcd", `{` + lcd + `, "console": {"cols": 80, "rows": 24}}`, "console", "only a console display"},
		{"keypad kind missing", `{` + lcd + `, "keypad": {}}`, "keypad.kind", `required: "4x4" or "3x4"`},
		{"keypad kind", `{` + lcd + `, "keypad": {"kind": "5x5"}}`, "keypad.kind", `"5x5": want "4x4" or "3x4"`},
		{"keypad rows", `{` + lcd + `, "keypad": {"kind": "4x4", "rows": ["GPIO5"], "cols": ["GPIO12", "GPIO16", "GPIO20", "GPIO21"]}}`, "keypad.rows", "a 4x4 keypad has 4 row pins, got 1"},
		{"keypad cols", `{` + lcd + `, "keypad": {"kind": "3x4", "rows": ["GPIO5", "GPIO6", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO16", "GPIO20", "GPIO21"]}}`, "keypad.cols", "a 3x4 keypad has 3 column pins, got 4"},
		{"keypad pin twice", `{` + lcd + `, "keypad": {"kind": "4x4", "rows": ["GPIO5", "GPIO6", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO5", "GPIO20", "GPIO21"]}}`, "keypad.cols[1]", "GPIO5 is already used by keypad.rows[0]"},
		{"keypad on I2C pins", `{` + lcd + `, "keypad": {"kind": "4x4", "rows": ["GPIO2", "GPIO6", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO16", "GPIO20", "GPIO21"]}}`, "keypad.rows[0]", "GPIO2 is the I2C1 SDA line used by the display"},
		{"keypad on LCD pins", `{"display": {"kind": "hd44780-gpio", "rows": 2, "cols": 16, "pins": {"rs": "GPIO25", "en": "GPIO24", "d4": "GPIO23", "d5": "GPIO17", "d6": "GPIO18", "d7": "GPIO22"}}, "keypad": {"kind": "3x4", "rows": ["GPIO5", "GPIO6", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO16", "GPIO25"]}}`, "keypad.cols[2]", "GPIO25 is already used by display.pins.rs"},
		{"keypad on UART pins", `{"display": {"kind": "console"}, "serial": {"port": "/dev/serial0"}, "keypad": {"kind": "3x4", "rows": ["GPIO5", "GPIO6", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO16", "GPIO14"]}}`, "keypad.cols[2]", "GPIO14 is the UART TX line"},
		{"keypad empty pin", `{` + lcd + `, "keypad": {"kind": "4x4", "rows": ["GPIO5", "", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO16", "GPIO20", "GPIO21"]}}`, "keypad.rows[1]", "empty pin name"},
		{"keymap size", `{` + lcd + `, "keypad": {` + kp4 + `, "keymap": ["123", "456", "789", "*0#"]}}`, "keypad.keymap", "is 4x3, a 4x4 keypad is 4x4"},
		{"keymap duplicate", `{` + lcd + `, "keypad": {` + kp4 + `, "keymap": ["123A", "456B", "789C", "*0#A"]}}`, "keypad.keymap", "keymap key 'A' is at row 0 column 3 and row 3 column 3"},
		{"keymap element type", `{` + lcd + `, "keypad": {` + kp4 + `, "keymap": ["123A", 4]}}`, "keypad.keymap[1]", "want a string, got a number"},
		{"debounce text", `{` + lcd + `, "keypad": {` + kp4 + `, "debounce": "fast"}}`, "keypad.debounce", `"fast" is not a duration`},
		{"debounce number", `{` + lcd + `, "keypad": {` + kp4 + `, "debounce": 20}}`, "keypad.debounce", `want a duration string such as "20ms", got 20`},
		{"debounce range", `{` + lcd + `, "keypad": {` + kp4 + `, "debounce": "1s"}}`, "keypad.debounce", "1s is out of range (0-200ms)"},
		{"repeat rate", `{` + lcd + `, "keypad": {` + kp4 + `, "repeat_rate": 100}}`, "keypad.repeat_rate", "100 is out of range"},
		{"mode", `{` + lcd + `, "keypad": {` + kp4 + `, "mode": "typing"}}`, "keypad.mode", `"typing": want "multitap" or "kiosk"`},
		{"kiosk without phrases", `{` + lcd + `, "keypad": {` + kp4 + `, "mode": "kiosk"}}`, "keypad.phrases", "kiosk mode needs phrases"},
		{"phrases in multitap", `{` + lcd + `, "keypad": {` + kp4 + `, "phrases": {"1": "yes"}}}`, "keypad.phrases", "only used in kiosk mode"},
		{"phrase key unknown", `{` + lcd + `, "keypad": {` + kp4 + `, "mode": "kiosk", "phrases": {"E": "yes"}}}`, "keypad.phrases.E", "key 'E' is not on the keypad"},
		{"phrase key name", `{` + lcd + `, "keypad": {` + kp4 + `, "mode": "kiosk", "phrases": {"12": "yes"}}}`, "keypad.phrases.12", "want one key label"},
		{"phrase on scroll key", `{` + lcd + `, "keypad": {` + kp4 + `, "mode": "kiosk", "phrases": {"A": "yes"}}}`, "keypad.phrases.A", "also bound to scroll_up"},
		{"phrase blank", `{` + lcd + `, "keypad": {` + kp4 + `, "mode": "kiosk", "phrases": {"1": " "}}}`, "keypad.phrases.1", "blank phrase"},
		{"binding not on keypad", `{` + lcd + `, "keypad": {` + kp4 + `, "keys": {"delete": "E"}}}`, "keypad.keys.delete", "key 'E' is not on the keypad"},
		{"binding syntax", `{` + lcd + `, "keypad": {` + kp4 + `, "keys": {"send": "hold:"}}}`, "keypad.keys.send", `"hold:": want one key label`},
		{"binding twice", `{` + lcd + `, "keypad": {` + kp4 + `, "keys": {"send": "#", "delete": "#"}}}`, "keypad.keys.delete", `"#" is already bound to send`},
		{"serial on lcd", `{` + lcd + `, "serial": {"port": "/dev/serial0"}}`, "serial", "only a console display uses a serial port"},
		{"serial port missing", `{"display": {"kind": "console"}, "serial": {"baud": 9600}}`, "serial.port", "required"},
		{"serial port relative", `{"display": {"kind": "console"}, "serial": {"port": "ttyUSB0"}}`, "serial.port", "want an absolute device path"},
		{"serial baud", `{"display": {"kind": "console"}, "serial": {"port": "/dev/ttyUSB0", "baud": 1234}}`, "serial.baud", "1234 is not a standard rate"},
		{"serial baud negative", `{"display": {"kind": "console"}, "serial": {"port": "/dev/ttyUSB0", "baud": -1}}`, "serial.baud", "-1 is not a standard rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.json", []byte(tt.json))
			if err == nil {
				t.Fatalf("no error, want %s: %s", tt.path, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *FieldError", err)
			}
			if fe.File != "test.json" || fe.Path != tt.path {
				t.Errorf("FieldError file %q path %q, want test.json %q (%v)", fe.File, fe.Path, tt.path, err)
			}
		})
	}
}

func TestValidationReportsEverything(t *testing.T) {
	_, err := Parse("x.json", []byte(`{"display": {"kind": "hd44780-i2c", "rows": 3, "cols": 99, "bus": "1", "address": 1}}`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"display.rows", "display.cols", "display.address"} {
		if !strings.Contains(err.Error(), "x.json: "+want+": ") {
			t.Errorf("missing %s in:\n%v", want, err)
		}
	}
}

func TestValidateFillsDefaults(t *testing.T) {
	p := &Profile{Name: "code", Display: Display{Kind: HD44780I2C, Rows: 2, Cols: 16, Bus: "1", Address: Address{I2C: 0x3f}},
		Keypad: &Keypad{Kind: Keypad3x4, Rows: []string{"GPIO5", "GPIO6", "GPIO13", "GPIO19"}, Cols: []string{"GPIO12", "GPIO16", "GPIO20"}}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Display.ROM != "A00" || !*p.Display.Backlight || len(p.Keypad.Keymap) != 4 || p.Keypad.Keys.Delete != "hold:*" {
		t.Fatalf("defaults not filled: %+v %+v", p.Display, p.Keypad)
	}
	p.Display.Kind = "lcd"
	if err := p.Validate(); err == nil {
		t.Fatal("bad kind accepted")
	}
}

func TestCamelCaseKeys(t *testing.T) {
	p, err := Parse("t.json", []byte(`{`+lcd+`, "keypad": {`+kp4+`, "repeatDelay": "300ms", "multitapTimeout": "1s", "keys": {"scrollUp": "A", "Send": "#"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Keypad.RepeatDelay != Duration(300*time.Millisecond) || p.Keypad.Keys.ScrollUp != "A" || p.Keypad.Keys.Send != "#" {
		t.Fatalf("%+v %+v", p.Keypad, p.Keypad.Keys)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range Names() {
		data, _ := profiles.ReadFile("profiles/" + name + ".json")
		f.Add(data)
	}
	f.Add([]byte(`{"display": {"kind": "console"}, "console": {"cols": 80, "rows": 24}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.json", data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a profile Validate refuses: %v", err)
		}
	})
}

func TestLCDprocProfile(t *testing.T) {
	p, err := Load("lcdproc")
	if err != nil {
		t.Fatal(err)
	}
	d := p.Display
	if d.Kind != LCDproc || d.Address.Host != "127.0.0.1:13666" || d.Rows != 4 || d.Cols != 20 || d.Keys["Enter"] != "#" || d.Keys["Up"] != "A" {
		t.Fatalf("lcdproc display %+v", d)
	}
	// Defaults: address, size, keys. A keypad block without pins sets up
	// kiosk entry for LCDd's keys.
	p, err = Parse("k.json", []byte(`{"display": {"kind": "lcdproc"}, "keypad": {"kind": "3x4", "mode": "kiosk", "phrases": {"1": "yes"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Display.Address.Host != "127.0.0.1:13666" || p.Display.Keys["Enter"] != "#" || p.Display.Keys["Down"] != "" || p.Keypad.Mode != "kiosk" {
		t.Fatalf("%+v %+v", p.Display, p.Keypad)
	}
	// Without pins only on lcdproc.
	if _, err := Parse("k.json", []byte(`{`+lcd+`, "keypad": {"kind": "3x4"}}`)); err == nil || !strings.Contains(err.Error(), "keypad.rows") {
		t.Fatalf("pinless keypad on an I2C LCD: %v", err)
	}
}
