package device

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"termlink/display"
)

// QuestionNextKeys and QuestionPrevKeys page through a question longer
// than the screen: '#' (or B, 0) shows the next page, '*' (or A) the one
// before, wrapping around. 1-9 answer.
const (
	QuestionNextKeys = "#B0"
	QuestionPrevKeys = "*A"
)

// question lays out the open question (or what became of the last one)
// on the whole frame. The question's text, wrapped, is followed by its
// options, each on a line of its own starting with its key ("1 Allow
// once"); the rows above the last are a page of those lines, and the
// last row says which page ("?1/3 #>" when there are more: '#' turns
// the page) and the time left at its right ("42s").
func (v *LCDView) question(m *Model, rows, cols int, now time.Time) {
	f := v.frame
	if m.Said.Text != "" {
		pages := display.Layout(v.Screen, m.Said.Text, rows, cols)
		if len(pages) > 0 {
			for r, l := range pages[0] {
				f.SetLine(r, l)
			}
		}
		return
	}
	a := m.Ask
	lines := QuestionLines(v.Screen, a, cols)
	page := max(rows-1, 1)
	pages := max((len(lines)+page-1)/page, 1)
	p := ((a.Page % pages) + pages) % pages
	a.Page = p
	if rows > 1 {
		for i, l := range lines[p*page : min((p+1)*page, len(lines))] {
			f.SetLine(i, l)
		}
	}
	left := "?"
	if pages > 1 {
		left = fmt.Sprintf("?%d/%d #>", p+1, pages)
	}
	right := TimeLeft(now, a.Deadline)
	width := cols - utf8.RuneCountInString(right) - 1
	if width < 1 {
		f.SetLine(rows-1, right)
		return
	}
	if n := utf8.RuneCountInString(left); n > width {
		left = string([]rune(left)[:width])
	}
	f.SetLine(rows-1, fmt.Sprintf("%-*s %s", width, left, right))
}

// QuestionLines are the lines of a question on a screen cols wide: its
// text wrapped, then each option under its key ("1 Allow once"), wrapped
// with the label's next lines indented under the label.
func QuestionLines(cs display.Charset, a *Ask, cols int) []string {
	lines := display.Wrap(display.Fold(cs, a.Q.Text), cols)
	for i, o := range a.Q.Options {
		key := strconv.Itoa(i + 1)
		label := display.Fold(cs, o.Label)
		if cols <= 4 {
			lines = append(lines, display.Wrap(key+" "+label, cols)...)
			continue
		}
		for j, l := range display.Wrap(label, cols-2) {
			if j == 0 {
				lines = append(lines, key+" "+l)
			} else {
				lines = append(lines, "  "+l)
			}
		}
	}
	return lines
}
