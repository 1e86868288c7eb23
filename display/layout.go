package display

import "strings"

// Wrap breaks s into lines of at most cols runes.
//
// Lines break at spaces; runs of spaces collapse to one and vanish at line
// ends. A word longer than cols starts a new line and is cut every cols runes.
// Each '\n' starts a new line; blank lines are kept, a single trailing '\n'
// does not add an empty line. The no-break space (U+00A0) does not break.
// Wrap counts one cell per rune, so pass text through Fold first. It returns
// nil for an empty s or cols < 1.
func Wrap(s string, cols int) []string {
	if cols < 1 || s == "" {
		return nil
	}
	s = strings.TrimSuffix(s, "\n")
	var out []string
	for _, para := range strings.Split(s, "\n") {
		out = wrapPara(out, para, cols)
	}
	return out
}

func wrapPara(out []string, para string, cols int) []string {
	words := strings.FieldsFunc(para, func(r rune) bool { return r == ' ' })
	if len(words) == 0 {
		return append(out, "")
	}
	var line []rune
	for _, w := range words {
		word := []rune(w)
		switch {
		case len(line) > 0 && len(line)+1+len(word) <= cols:
			line = append(append(line, ' '), word...)
			continue
		case len(line) > 0:
			out = append(out, string(line))
			line = line[:0]
		}
		for len(word) > cols {
			out = append(out, string(word[:cols]))
			word = word[cols:]
		}
		line = append(line, word...)
	}
	if len(line) > 0 {
		out = append(out, string(line))
	}
	return out
}

// Paginate groups lines into pages of rows lines; the last page may be
// shorter. It returns nil for no lines or rows < 1.
func Paginate(lines []string, rows int) [][]string {
	if rows < 1 || len(lines) == 0 {
		return nil
	}
	pages := make([][]string, 0, (len(lines)+rows-1)/rows)
	for len(lines) > rows {
		pages = append(pages, lines[:rows:rows])
		lines = lines[rows:]
	}
	return append(pages, lines)
}

// Layout folds text to cs, wraps it to cols and cuts it into pages of rows
// lines: the pages a screen of rows x cols shows one after the other.
func Layout(cs Charset, text string, rows, cols int) [][]string {
	return Paginate(Wrap(Fold(cs, text), cols), rows)
}
