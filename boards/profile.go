package boards

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"termlink/internal/keymap"
)

// Profile describes one board: its display, keypad and serial console.
type Profile struct {
	// Name is the profile's name (default: the file name without .json).
	// An embedded profile's name is its file name; a file loaded by path
	// may keep the name of the profile it was copied from.
	Name string `json:"name"`
	// Description says what the board is, for humans.
	Description string `json:"description"`
	// Display is the screen. Required.
	Display Display `json:"display"`
	// Keypad is the matrix keypad, if any.
	Keypad *Keypad `json:"keypad,omitempty"`
	// Serial is the serial port of a console display; without it a console
	// display is this process's own terminal.
	Serial *Serial `json:"serial,omitempty"`
	// Console sets the terminal size of a console display; zero (or
	// absent) asks the terminal.
	Console *ConsoleSize `json:"console,omitempty"`
	// Kiosk gives termd's kiosk defaults for the board (its flags
	// --idle-seconds, --idle-text and --backlight-off-after win).
	Kiosk *Kiosk `json:"kiosk,omitempty"`
}

// Kiosk is the idle behaviour of a kiosk board; 0 seconds: never.
type Kiosk struct {
	IdleSeconds       int    `json:"idleSeconds"`
	IdleText          string `json:"idleText"`
	BacklightOffAfter int    `json:"backlightOffAfter"`
}

// DisplayKind is the kind of screen.
type DisplayKind string

// Display kinds.
const (
	HD44780I2C  DisplayKind = "hd44780-i2c"  // character LCD behind a PCF8574 I²C backpack
	HD44780GPIO DisplayKind = "hd44780-gpio" // character LCD on six GPIO lines (4-bit mode)
	Console     DisplayKind = "console"      // VT100 terminal: this one, or over Serial
	LCDproc     DisplayKind = "lcdproc"      // any display LCDproc's LCDd drives, termd as its client
	HD44780Emu  DisplayKind = "hd44780-emu"  // the HD44780 emulator (PCF8574 at 0x27) drawn in this terminal, keys from its keyboard
)

var displayKinds = []DisplayKind{HD44780I2C, HD44780GPIO, Console, LCDproc, HD44780Emu}

// Display describes the screen.
type Display struct {
	Kind DisplayKind `json:"kind"`
	// Rows and Cols are the LCD size (1, 2 or 4 rows; 8-40 columns, at
	// most 20 with 4 rows). Not used by console displays; for lcdproc the
	// size assumed until LCDd tells its own (default 4 x 20).
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
	// Bus is the periph I²C bus name ("1", "I2C1" or "/dev/i2c-1").
	Bus string `json:"bus,omitempty"`
	// Address is the backpack's I²C address (hd44780-i2c: a JSON number
	// or a string such as "0x27"), or LCDd's host:port (lcdproc; default
	// "127.0.0.1:13666").
	Address Address `json:"address,omitzero"`
	// Keys maps the names of the keys LCDd reports ("Up", "Enter", "1")
	// to keypad keys, in the keypad's binding grammar ("#", "hold:*"):
	// they drive the same text entry as a keypad. lcdproc only; default
	// DefaultLCDprocKeys.
	Keys map[string]string `json:"keys,omitempty"`
	// PinMap is the backpack's wiring when it is not the common one
	// (P0=RS, P1=RW, P2=EN, P3=backlight, P4-P7=D4-D7).
	PinMap *PinMap `json:"pinmap,omitempty"`
	// ROM is the controller's character ROM, "A00" (default) or "A02".
	ROM string `json:"rom,omitempty"`
	// Backlight turns the backlight on at start; default true.
	Backlight *bool `json:"backlight,omitempty"`
	// Pins are the GPIO lines of a parallel LCD.
	Pins *LCDPins `json:"pins,omitempty"`
}

// PinMap gives the PCF8574 port bit (0-7) wired to each LCD line.
type PinMap struct {
	RS                 *int `json:"rs"`
	RW                 *int `json:"rw"`
	EN                 *int `json:"en"`
	BL                 *int `json:"bl"`
	D4                 *int `json:"d4"`
	D5                 *int `json:"d5"`
	D6                 *int `json:"d6"`
	D7                 *int `json:"d7"`
	BacklightActiveLow bool `json:"backlight_active_low"`
}

// LCDPins are the periph GPIO names ("GPIO25") of a parallel HD44780 in
// 4-bit mode with R/W tied to ground.
type LCDPins struct {
	RS        string `json:"rs"`
	EN        string `json:"en"`
	D4        string `json:"d4"`
	D5        string `json:"d5"`
	D6        string `json:"d6"`
	D7        string `json:"d7"`
	Backlight string `json:"backlight,omitempty"` // optional backlight switch
}

// KeypadKind is the keypad layout.
type KeypadKind string

// Keypad kinds.
const (
	Keypad4x4 KeypadKind = "4x4" // 4 rows, 4 columns: 0-9 A-D * #
	Keypad3x4 KeypadKind = "3x4" // 4 rows, 3 columns: 0-9 * #
)

// Keypad describes a matrix keypad.
type Keypad struct {
	Kind KeypadKind `json:"kind"`
	// Rows are the GPIO names of the row lines (driven), top to bottom.
	// An lcdproc board may leave Rows and Cols out: the block then only
	// sets up the text entry (mode, keys, phrases) for LCDd's keys.
	Rows []string `json:"rows"`
	// Cols are the GPIO names of the column lines (inputs with pull-ups),
	// left to right.
	Cols []string `json:"cols"`
	// Keymap labels the keys, one string per row; default by kind.
	Keymap []string `json:"keymap,omitempty"`
	// Debounce, RepeatDelay: durations such as "20ms"; defaults 20ms and
	// 500ms. RepeatRate is repeats per second; default 15.
	Debounce    Duration `json:"debounce,omitempty"`
	RepeatDelay Duration `json:"repeat_delay,omitempty"`
	RepeatRate  float64  `json:"repeat_rate,omitempty"`
	// Mode is "multitap" (default: type text) or "kiosk" (keys send
	// Phrases).
	Mode string `json:"mode,omitempty"`
	// MultitapTimeout commits a pending letter; default 800ms.
	MultitapTimeout Duration `json:"multitap_timeout,omitempty"`
	// Keys binds text-entry functions; default by kind.
	Keys *KeyBindings `json:"keys,omitempty"`
	// Phrases maps a key label to the phrase it sends in kiosk mode.
	Phrases map[string]string `json:"phrases,omitempty"`
}

// KeyBindings binds text-entry functions to keys: "#" (press) or "hold:*"
// (hold until it repeats). Empty leaves a function unbound.
type KeyBindings struct {
	Case       string `json:"case"`
	Send       string `json:"send"`
	Delete     string `json:"delete"`
	ScrollUp   string `json:"scroll_up"`
	ScrollDown string `json:"scroll_down"`
}

// Serial is a serial port.
type Serial struct {
	Port string `json:"port"`
	Baud int    `json:"baud,omitempty"` // default 115200
}

// ConsoleSize is a terminal size; zero asks the terminal.
type ConsoleSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Addr is an I²C address. In JSON it is a number (39) or a string ("0x27").
type Addr uint16

// Address is display.address: an I²C address or a network host:port,
// as the display kind wants.
type Address struct {
	I2C  Addr   // hd44780-i2c
	Host string // lcdproc: "127.0.0.1:13666"
}

// UnmarshalJSON accepts 39, "0x27" (I²C) and "host:port".
func (a *Address) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' && json.Unmarshal(b, &s) == nil && strings.Contains(s, ":") {
		*a = Address{Host: s}
		return nil
	}
	var i Addr
	if err := i.UnmarshalJSON(b); err != nil {
		return err
	}
	*a = Address{I2C: i}
	return nil
}

// MarshalJSON writes "0x27" or "host:port".
func (a Address) MarshalJSON() ([]byte, error) { return json.Marshal(a.String()) }

// IsZero reports an address not given.
func (a Address) IsZero() bool { return a == Address{} }

func (a Address) String() string {
	if a.Host != "" {
		return a.Host
	}
	return a.I2C.String()
}

// DefaultLCDprocKeys maps the keys LCDd's drivers usually report to a
// 4x4 keypad (a profile with another keypad keeps the keys it has): the arrows scroll (Up, Down), delete (Left) and change the
// case (Right), Enter sends; digits, letters A-D, * and # (from a driver
// with a keyboard, such as curses) are themselves.
func DefaultLCDprocKeys() map[string]string {
	m := map[string]string{"Up": "A", "Down": "B", "Left": "D", "Right": "*", "Enter": "#"}
	for _, k := range "0123456789ABCD*#" {
		m[string(k)] = string(k)
	}
	return m
}

// UnmarshalJSON accepts 39, "39" or "0x27".
func (a *Addr) UnmarshalJSON(b []byte) error {
	var v uint64
	var err error
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err = strconv.ParseUint(s, 0, 16)
		if err != nil {
			return fmt.Errorf("%q is not an I2C address: write it like \"0x27\" or 39", s)
		}
	} else {
		v, err = strconv.ParseUint(string(b), 10, 16)
		if err != nil {
			return fmt.Errorf("%s is not an I2C address: write it like \"0x27\" or 39", b)
		}
	}
	if v > 0x7f {
		return fmt.Errorf("%#x is not a 7-bit I2C address", v)
	}
	*a = Addr(v)
	return nil
}

// MarshalJSON writes the address as "0x27".
func (a Addr) MarshalJSON() ([]byte, error) { return json.Marshal(a.String()) }

func (a Addr) String() string { return fmt.Sprintf("%#02x", uint16(a)) }

// Duration is a time.Duration written as a string such as "20ms".
type Duration time.Duration

// UnmarshalJSON parses "20ms", "1.5s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"20ms\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (write it like \"20ms\" or \"1.5s\")", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d Duration) String() string { return time.Duration(d).String() }

// Standard serial bit rates.
var bauds = []int{1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600}

// validator collects FieldErrors.
type validator struct {
	file string
	errs []error
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{File: v.file, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error { return errors.Join(v.errs...) }

// applyDefaults fills in what a profile may leave out.
func (p *Profile) applyDefaults() {
	d := &p.Display
	if d.Kind == HD44780I2C || d.Kind == HD44780GPIO || d.Kind == HD44780Emu {
		if d.ROM == "" {
			d.ROM = "A00"
		}
		if d.Backlight == nil {
			on := true
			d.Backlight = &on
		}
	}
	if d.Kind == LCDproc {
		if d.Address.IsZero() {
			d.Address = Address{Host: "127.0.0.1:13666"}
		}
		if d.Rows == 0 && d.Cols == 0 {
			d.Rows, d.Cols = 4, 20
		}
		if d.Backlight == nil {
			on := true
			d.Backlight = &on
		}
	}
	if k := p.Keypad; k != nil {
		if k.Keymap == nil {
			switch k.Kind {
			case Keypad4x4:
				k.Keymap = []string{"123A", "456B", "789C", "*0#D"}
			case Keypad3x4:
				k.Keymap = []string{"123", "456", "789", "*0#"}
			}
		}
		if k.Mode == "" {
			k.Mode = "multitap"
		}
		if k.Keys == nil {
			switch k.Kind {
			case Keypad4x4:
				k.Keys = &KeyBindings{Case: "*", Send: "#", Delete: "D", ScrollUp: "A", ScrollDown: "B"}
			case Keypad3x4:
				k.Keys = &KeyBindings{Case: "*", Send: "#", Delete: "hold:*"}
			}
		}
	}
	if d.Kind == LCDproc && d.Keys == nil {
		// The default map, less the keys the keypad does not have.
		km := keymap.Keymap4x4()
		if k := p.Keypad; k != nil {
			if m, err := keymap.Parse(k.Keymap); err == nil {
				km = m
			}
		}
		d.Keys = map[string]string{}
		for name, label := range DefaultLCDprocKeys() {
			if b, err := keymap.ParseBinding(label); err == nil && km.Has(b.Key) {
				d.Keys[name] = label
			}
		}
	}
	if s := p.Serial; s != nil && s.Baud == 0 {
		s.Baud = 115200
	}
}

// Validate fills in defaults (as Parse does), checks the profile and
// returns every problem found, each a *FieldError naming the field (joined
// with errors.Join).
func (p *Profile) Validate() error {
	p.applyDefaults()
	return p.validate("")
}

func (p *Profile) validate(file string) error {
	v := &validator{file: file}
	if p.Name != "" && !validName(p.Name) {
		v.add("name", "%q: use lower-case letters, digits and dashes", p.Name)
	}
	p.validateDisplay(v)
	if k := p.Kiosk; k != nil && (k.IdleSeconds < 0 || k.BacklightOffAfter < 0) {
		v.add("kiosk", "idleSeconds and backlightOffAfter must not be negative")
	}
	reserved := map[string]string{}
	if p.Display.Kind == HD44780I2C && (p.Display.Bus == "1" || p.Display.Bus == "I2C1" || p.Display.Bus == "/dev/i2c-1") {
		reserved["GPIO2"] = "the I2C1 SDA line used by the display"
		reserved["GPIO3"] = "the I2C1 SCL line used by the display"
	}
	if p.Serial != nil && (p.Serial.Port == "/dev/serial0" || p.Serial.Port == "/dev/ttyAMA0" || p.Serial.Port == "/dev/ttyS0") {
		reserved["GPIO14"] = "the UART TX line used by the serial console"
		reserved["GPIO15"] = "the UART RX line used by the serial console"
	}
	pins := map[string]string{} // pin name -> field path using it
	usePin := func(field, name string) {
		if name == "" {
			return
		}
		if why, ok := reserved[name]; ok {
			v.add(field, "%s is %s", name, why)
		}
		if other, ok := pins[name]; ok {
			v.add(field, "%s is already used by %s", name, other)
			return
		}
		pins[name] = field
	}
	if lp := p.Display.Pins; lp != nil && p.Display.Kind == HD44780GPIO {
		for _, f := range lp.fields() {
			usePin("display.pins."+f.name, f.value)
		}
	}
	if p.Keypad != nil {
		p.Keypad.validate(v, usePin, p.Display.Kind == LCDproc || p.Display.Kind == HD44780Emu)
	}
	if p.Serial != nil {
		s := p.Serial
		if p.Display.Kind != Console {
			v.add("serial", "only a console display uses a serial port")
		}
		if s.Port == "" {
			v.add("serial.port", "required, such as \"/dev/serial0\" or \"/dev/ttyUSB0\"")
		} else if !strings.HasPrefix(s.Port, "/") {
			v.add("serial.port", "%q: want an absolute device path such as \"/dev/serial0\"", s.Port)
		}
		if !slices.Contains(bauds, s.Baud) {
			v.add("serial.baud", "%d is not a standard rate (%s)", s.Baud, joinInts(bauds))
		}
	}
	if c := p.Console; c != nil {
		if p.Display.Kind != Console {
			v.add("console", "only a console display has a terminal size")
		}
		if (c.Cols == 0) != (c.Rows == 0) {
			v.add("console", "give both cols and rows, or neither to ask the terminal")
		}
		if c.Cols != 0 && (c.Cols < 20 || c.Cols > 500) {
			v.add("console.cols", "%d is out of range (20-500)", c.Cols)
		}
		if c.Rows != 0 && (c.Rows < 5 || c.Rows > 200) {
			v.add("console.rows", "%d is out of range (5-200)", c.Rows)
		}
	}
	return v.err()
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return s != ""
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

func (p *Profile) validateDisplay(v *validator) {
	d := &p.Display
	if d.Keys != nil && d.Kind != LCDproc && d.Kind != "" {
		v.add("display.keys", "only an lcdproc display reports keys (a keypad's keys are keypad.keys)")
	}
	switch d.Kind {
	case "":
		v.add("display.kind", "required: one of %s", kindList())
		return
	case HD44780I2C, HD44780GPIO, HD44780Emu:
		switch d.Rows {
		case 1, 2, 4:
		case 0:
			v.add("display.rows", "required: 1, 2 or 4")
		default:
			v.add("display.rows", "%d: an HD44780 has 1, 2 or 4 rows", d.Rows)
		}
		switch {
		case d.Cols == 0:
			v.add("display.cols", "required: 8 to 40 (16 or 20 usually)")
		case d.Cols < 8 || d.Cols > 40:
			v.add("display.cols", "%d: an HD44780 has 8 to 40 columns", d.Cols)
		case d.Rows == 4 && d.Cols > 20:
			v.add("display.cols", "%d: a 4-row HD44780 has at most 20 columns (40x4 needs two enable lines, not supported)", d.Cols)
		}
		if d.ROM != "A00" && d.ROM != "A02" {
			v.add("display.rom", "%q: want \"A00\" (Japanese, the usual one) or \"A02\" (European)", d.ROM)
		}
	case Console:
		if d.Rows != 0 || d.Cols != 0 {
			v.add("display", "rows and cols are for LCDs; set console.cols and console.rows for a console")
		}
		if d.ROM != "" {
			v.add("display.rom", "only an HD44780 has a character ROM")
		}
		if d.Backlight != nil {
			v.add("display.backlight", "only an LCD has a backlight")
		}
	case LCDproc:
		p.validateLCDproc(v)
	default:
		v.add("display.kind", "%q: want one of %s", d.Kind, kindList())
		return
	}
	if d.Kind == HD44780I2C {
		if d.Bus == "" {
			v.add("display.bus", "required: the I2C bus, \"1\" on a Raspberry Pi")
		}
		switch a := d.Address.I2C; {
		case d.Address.Host != "":
			v.add("display.address", "%q is a network address; an hd44780-i2c display wants the backpack's I2C address, such as \"0x27\"", d.Address.Host)
		case a == 0:
			v.add("display.address", "required: the backpack's address, usually \"0x27\" (PCF8574) or \"0x3F\" (PCF8574A)")
		case !(a >= 0x20 && a <= 0x27) && !(a >= 0x38 && a <= 0x3f):
			v.add("display.address", "%s is not a PCF8574 address (0x20-0x27, 0x38-0x3F)", a)
		}
		if pm := d.PinMap; pm != nil {
			seen := map[int]string{}
			for _, f := range pm.fields() {
				switch {
				case f.bit == nil:
					v.add("display.pinmap."+f.name, "required: the PCF8574 bit (0-7)")
				case *f.bit < 0 || *f.bit > 7:
					v.add("display.pinmap."+f.name, "%d: a PCF8574 bit is 0-7", *f.bit)
				case seen[*f.bit] != "":
					v.add("display.pinmap."+f.name, "bit %d is already %s", *f.bit, seen[*f.bit])
				default:
					seen[*f.bit] = f.name
				}
			}
		}
	} else {
		if d.Bus != "" {
			v.add("display.bus", "only an hd44780-i2c display is on an I2C bus")
		}
		if !d.Address.IsZero() && d.Kind != LCDproc {
			v.add("display.address", "only an hd44780-i2c display has an I2C address")
		}
		if d.PinMap != nil {
			v.add("display.pinmap", "only an hd44780-i2c display has a backpack pin map")
		}
	}
	if d.Kind == HD44780GPIO {
		if d.Pins == nil {
			v.add("display.pins", "required: the GPIO names of rs, en, d4, d5, d6 and d7")
		} else {
			for _, f := range d.Pins.fields() {
				if f.value == "" && f.name != "backlight" {
					v.add("display.pins."+f.name, "required: a GPIO name such as \"GPIO25\"")
				}
			}
		}
	} else if d.Pins != nil {
		v.add("display.pins", "only an hd44780-gpio display has GPIO pins")
	}
}

// validateLCDproc checks an lcdproc display: LCDd's address and the key
// map.
func (p *Profile) validateLCDproc(v *validator) {
	d := &p.Display
	if d.Address.Host == "" {
		v.add("display.address", "%s: LCDd's address is host:port, such as \"127.0.0.1:13666\"", d.Address)
	} else if host, port, err := net.SplitHostPort(d.Address.Host); err != nil || host == "" {
		v.add("display.address", "%q: want host:port, such as \"127.0.0.1:13666\"", d.Address.Host)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.add("display.address", "%q: the port must be 1-65535", d.Address.Host)
	}
	if d.Rows < 1 || d.Rows > 64 {
		v.add("display.rows", "%d: want 1-64 (the size until LCDd tells its own)", d.Rows)
	}
	if d.Cols < 1 || d.Cols > 256 {
		v.add("display.cols", "%d: want 1-256 (the size until LCDd tells its own)", d.Cols)
	}
	if d.ROM != "" {
		v.add("display.rom", "only an HD44780 has a character ROM; LCDd's driver maps characters itself")
	}
	if d.Pins != nil {
		v.add("display.pins", "only an hd44780-gpio display has GPIO pins")
	}
	km := keymap.Keymap4x4()
	if k := p.Keypad; k != nil {
		if m, err := keymap.Parse(k.Keymap); err == nil {
			km = m
		}
	}
	names := make([]string, 0, len(d.Keys))
	for name := range d.Keys {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := "display.keys." + name
		if name == "" || len(name) > 40 || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == '"' || r == '\\' || r == '{' || r == '}' || r > 0x7e }) {
			v.add(path, "%q is not an LCDd key name (printable ASCII without spaces, quotes, braces or backslashes)", name)
			continue
		}
		b, err := keymap.ParseBinding(d.Keys[name])
		switch {
		case err != nil || b.Key == 0:
			v.add(path, "%q: want one keypad key such as \"#\", or \"hold:*\"", d.Keys[name])
		case !km.Has(b.Key):
			v.add(path, "key %q is not on the keypad (%s)", b.Key, km)
		}
	}
}

func kindList() string {
	s := make([]string, len(displayKinds))
	for i, k := range displayKinds {
		s[i] = strconv.Quote(string(k))
	}
	return strings.Join(s, ", ")
}

type pinField struct {
	name  string
	value string
}

func (l *LCDPins) fields() []pinField {
	return []pinField{{"rs", l.RS}, {"en", l.EN}, {"d4", l.D4}, {"d5", l.D5}, {"d6", l.D6}, {"d7", l.D7}, {"backlight", l.Backlight}}
}

type bitField struct {
	name string
	bit  *int
}

func (m *PinMap) fields() []bitField {
	return []bitField{{"rs", m.RS}, {"rw", m.RW}, {"en", m.EN}, {"bl", m.BL}, {"d4", m.D4}, {"d5", m.D5}, {"d6", m.D6}, {"d7", m.D7}}
}

// validate checks the keypad; pinless allows a keypad block without pins
// (on an lcdproc display it only sets up the text entry for LCDd's keys).
func (k *Keypad) validate(v *validator, usePin func(field, name string), pinless bool) {
	var nr, nc int
	switch k.Kind {
	case Keypad4x4:
		nr, nc = 4, 4
	case Keypad3x4:
		nr, nc = 4, 3
	case "":
		v.add("keypad.kind", "required: \"4x4\" or \"3x4\"")
		return
	default:
		v.add("keypad.kind", "%q: want \"4x4\" or \"3x4\"", k.Kind)
		return
	}
	noPins := pinless && len(k.Rows) == 0 && len(k.Cols) == 0
	if len(k.Rows) != nr && !noPins {
		v.add("keypad.rows", "a %s keypad has %d row pins, got %d", k.Kind, nr, len(k.Rows))
	}
	if len(k.Cols) != nc && !noPins {
		v.add("keypad.cols", "a %s keypad has %d column pins, got %d", k.Kind, nc, len(k.Cols))
	}
	for i, p := range k.Rows {
		if p == "" {
			v.add(fmt.Sprintf("keypad.rows[%d]", i), "empty pin name")
		}
		usePin(fmt.Sprintf("keypad.rows[%d]", i), p)
	}
	for i, p := range k.Cols {
		if p == "" {
			v.add(fmt.Sprintf("keypad.cols[%d]", i), "empty pin name")
		}
		usePin(fmt.Sprintf("keypad.cols[%d]", i), p)
	}
	km, err := keymap.Parse(k.Keymap)
	switch {
	case err != nil:
		v.add("keypad.keymap", "%s", err.Error())
		km = nil
	default:
		if r, c := km.Size(); r != nr || c != nc {
			v.add("keypad.keymap", "is %dx%d, a %s keypad is %dx%d (rows x columns)", r, c, k.Kind, nr, nc)
		}
	}
	if k.Debounce < 0 || time.Duration(k.Debounce) > 200*time.Millisecond {
		v.add("keypad.debounce", "%v is out of range (0-200ms)", k.Debounce)
	}
	if k.RepeatDelay < 0 || time.Duration(k.RepeatDelay) > 5*time.Second {
		v.add("keypad.repeat_delay", "%v is out of range (0-5s)", k.RepeatDelay)
	}
	if k.RepeatRate < 0 || k.RepeatRate > 50 {
		v.add("keypad.repeat_rate", "%v is out of range (0-50 per second)", k.RepeatRate)
	}
	if k.MultitapTimeout < 0 || time.Duration(k.MultitapTimeout) > 10*time.Second {
		v.add("keypad.multitap_timeout", "%v is out of range (0-10s)", k.MultitapTimeout)
	}
	switch k.Mode {
	case "multitap":
		if len(k.Phrases) > 0 {
			v.add("keypad.phrases", "only used in kiosk mode (keypad.mode \"kiosk\")")
		}
	case "kiosk":
		if len(k.Phrases) == 0 {
			v.add("keypad.phrases", "kiosk mode needs phrases: {\"1\": \"yes\", ...}")
		}
	default:
		v.add("keypad.mode", "%q: want \"multitap\" or \"kiosk\"", k.Mode)
	}
	bound := map[keymap.Binding]string{}
	if k.Keys != nil {
		for _, f := range k.Keys.fields() {
			b, err := keymap.ParseBinding(f.value)
			p := "keypad.keys." + f.name
			if err != nil {
				v.add(p, "%q: want one key label such as \"#\", or \"hold:*\"", f.value)
				continue
			}
			if b.Key == 0 {
				continue
			}
			if km != nil && !km.Has(b.Key) {
				v.add(p, "key %q is not on the keypad (%s)", b.Key, km)
			}
			if other, ok := bound[b]; ok {
				v.add(p, "%q is already bound to %s", f.value, other)
			}
			bound[b] = f.name
		}
	}
	for key, phrase := range k.Phrases {
		p := "keypad.phrases." + key
		r, size := utf8.DecodeRuneInString(key)
		switch {
		case size == 0 || size != len(key):
			v.add(p, "want one key label as the name")
		case km != nil && !km.Has(r):
			v.add(p, "key %q is not on the keypad (%s)", r, km)
		case bound[keymap.Binding{Key: r}] != "" && k.Mode == "kiosk":
			v.add(p, "key %q is also bound to %s", r, bound[keymap.Binding{Key: r}])
		}
		if strings.TrimSpace(phrase) == "" {
			v.add(p, "blank phrase")
		} else if len(phrase) > 2000 {
			v.add(p, "phrase longer than 2000 bytes")
		}
	}
}

func (b *KeyBindings) fields() []pinField {
	return []pinField{{"case", b.Case}, {"send", b.Send}, {"delete", b.Delete}, {"scroll_up", b.ScrollUp}, {"scroll_down", b.ScrollDown}}
}

// Layout returns the keypad's keymap, parsed.
func (k *Keypad) Layout() (keymap.Keymap, error) { return keymap.Parse(k.Keymap) }

// RepeatInterval is the time between auto-repeats (RepeatRate), zero for
// the keypad driver's default.
func (k *Keypad) RepeatInterval() time.Duration {
	if k.RepeatRate > 0 {
		return time.Duration(float64(time.Second) / k.RepeatRate)
	}
	return 0
}

// EntryKeys returns the text-entry bindings.
func (k *Keypad) EntryKeys() keymap.Keys {
	var out keymap.Keys
	if k.Keys == nil {
		return out
	}
	out.Case, _ = keymap.ParseBinding(k.Keys.Case)
	out.Send, _ = keymap.ParseBinding(k.Keys.Send)
	out.Delete, _ = keymap.ParseBinding(k.Keys.Delete)
	out.ScrollUp, _ = keymap.ParseBinding(k.Keys.ScrollUp)
	out.ScrollDown, _ = keymap.ParseBinding(k.Keys.ScrollDown)
	return out
}

// PhraseMap returns the kiosk phrases by key label.
func (k *Keypad) PhraseMap() map[rune]string {
	out := make(map[rune]string, len(k.Phrases))
	for key, p := range k.Phrases {
		r, _ := utf8.DecodeRuneInString(key)
		out[r] = p
	}
	return out
}
