package lcdproc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind is the kind of a line LCDd sends.
type Kind uint8

// Kinds of lines from LCDd (server/commands and server/input.c of LCDproc).
const (
	Connect Kind = iota + 1 // answer to hello: "connect LCDproc 0.5.9 protocol 0.4 lcd wid 20 hgt 4 cellwid 5 cellhgt 8"
	Success                 // "success": one per command (and one per option of screen_set)
	Huh                     // "huh? <error>": a command was refused
	Listen                  // "listen <screen>": the screen is now shown
	Ignore                  // "ignore <screen>": the screen is no longer shown
	Key                     // "key <name> [<screen>]": a key reserved by this client was pressed
	Noop                    // "noop complete": answer to noop
	Menu                    // "menuevent ...": from LCDd's menu (not used by termd)
	Bye                     // "bye": LCDd is shutting down
)

func (k Kind) String() string {
	switch k {
	case Connect:
		return "connect"
	case Success:
		return "success"
	case Huh:
		return "huh?"
	case Listen:
		return "listen"
	case Ignore:
		return "ignore"
	case Key:
		return "key"
	case Noop:
		return "noop complete"
	case Menu:
		return "menuevent"
	case Bye:
		return "bye"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Response is one line from LCDd, parsed.
type Response struct {
	Kind Kind
	// Connect: the display's size in characters, and LCDd's versions.
	Cols, Rows      int
	Server, Version string // "LCDproc", "0.5.9"
	Protocol        string // "0.4"
	// Huh: LCDd's message. Listen, Ignore: the screen id. Key: the key
	// name (and Screen, when LCDd names one). Menu: the rest of the line.
	Text   string
	Screen string
}

// maxLine bounds a line from LCDd (LCDd's own messages are short; its
// receive buffer is 8 KiB).
const maxLine = 8192

// ParseResponse parses one line LCDd sent, without its newline.
func ParseResponse(line string) (Response, error) {
	if len(line) > maxLine {
		return Response{}, fmt.Errorf("lcdproc: line of %d bytes from LCDd (limit %d)", len(line), maxLine)
	}
	line = strings.TrimRight(line, "\r")
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "success":
		return Response{Kind: Success}, nil
	case "huh?":
		return Response{Kind: Huh, Text: strings.TrimSpace(rest)}, nil
	case "listen", "ignore":
		id := strings.TrimSpace(rest)
		if id == "" || strings.ContainsAny(id, " \t") {
			return Response{}, fmt.Errorf("lcdproc: %q: want one screen id", line)
		}
		k := Listen
		if word == "ignore" {
			k = Ignore
		}
		return Response{Kind: k, Screen: id}, nil
	case "key":
		f := strings.Fields(rest)
		switch len(f) {
		case 1:
			return Response{Kind: Key, Text: f[0]}, nil
		case 2:
			return Response{Kind: Key, Text: f[0], Screen: f[1]}, nil
		}
		return Response{}, fmt.Errorf("lcdproc: %q: want \"key <name>\" or \"key <name> <screen>\"", line)
	case "noop":
		if strings.TrimSpace(rest) != "complete" {
			return Response{}, fmt.Errorf("lcdproc: %q: want \"noop complete\"", line)
		}
		return Response{Kind: Noop}, nil
	case "menuevent":
		return Response{Kind: Menu, Text: strings.TrimSpace(rest)}, nil
	case "bye":
		return Response{Kind: Bye}, nil
	case "connect":
		return parseConnect(line, rest)
	case "":
		return Response{}, errors.New("lcdproc: empty line from LCDd")
	}
	return Response{}, fmt.Errorf("lcdproc: unknown line from LCDd: %.80q", line)
}

// parseConnect reads "LCDproc 0.5.9 protocol 0.4 lcd wid 20 hgt 4 cellwid 5
// cellhgt 8" (server/commands/client_commands.c, hello_func).
func parseConnect(line, rest string) (Response, error) {
	f := strings.Fields(rest)
	r := Response{Kind: Connect}
	if len(f) >= 2 {
		r.Server, r.Version = f[0], f[1]
	}
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "protocol":
			r.Protocol = f[i+1]
		case "wid", "hgt":
			n, err := strconv.Atoi(f[i+1])
			if err != nil || n < 1 || n > 256 {
				return Response{}, fmt.Errorf("lcdproc: %.80q: %s %q is not a size", line, f[i], f[i+1])
			}
			if f[i] == "wid" {
				r.Cols = n
			} else {
				r.Rows = n
			}
			i++
		}
	}
	if r.Cols == 0 || r.Rows == 0 {
		return Response{}, fmt.Errorf("lcdproc: %.80q: no display size (wid, hgt)", line)
	}
	return r, nil
}

// Quote returns s as one argument of an LCDd command: in double quotes,
// with '"' and '\' escaped by a backslash (server/parse.c). Control
// characters, which would end the command or move LCDd's cursor, become
// spaces; runes outside printable ASCII become '?' (LCDd draws bytes).
func Quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteByte(' ')
		case r > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Unquote undoes what LCDd's parser does to one double-quoted argument
// (server/parse.c): a backslash before n, r or t is that control
// character, before anything else the character itself. It is the other
// half of Quote, for tests and for reading commands back.
func Unquote(s string) (string, error) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", fmt.Errorf("lcdproc: %.40q is not a quoted argument", s)
	}
	in := s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '\\':
			if i+1 >= len(in) {
				return "", fmt.Errorf("lcdproc: %.40q ends in a backslash", s)
			}
			i++
			switch in[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(in[i])
			}
		case c == '"':
			return "", fmt.Errorf("lcdproc: %.40q has an unescaped quote inside", s)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
