package harness

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// BuildRequest returns the text the agent gets on stdin, as the Term
// Challenge protocol lays it out:
//
//	Task Description:
//	{task}
//
//	{feedback, when there is any}
//
//	Current terminal state:
//	{screen}
//
//	{the confirmation question, when confirm is set}
//
// feedback is the errors or warnings of the previous response (see
// errorBlock and warningBlock) and harness notes; format picks the wording
// of the confirmation question.
func BuildRequest(task, feedback, screen string, confirm bool, format Format) string {
	var b strings.Builder
	b.Grow(len(task) + len(feedback) + len(screen) + 300)
	b.WriteString("Task Description:\n")
	b.WriteString(task)
	b.WriteString("\n\n")
	if feedback != "" {
		b.WriteString(strings.TrimRight(feedback, "\n"))
		b.WriteString("\n\n")
	}
	b.WriteString("Current terminal state:\n")
	b.WriteString(screen)
	if confirm {
		b.WriteString("\n\n")
		b.WriteString(ConfirmQuestion(format))
	}
	b.WriteString("\n")
	return b.String()
}

// ConfirmQuestion is the question that answers a first task_complete,
// worded for the response format (terminus-2's wording).
func ConfirmQuestion(format Format) string {
	const q = "Are you sure you want to mark the task as complete? " +
		"This will trigger your solution to be graded and you won't be able to " +
		"make any further corrections. If so, include "
	if format == FormatXML {
		return q + "<task_complete>true</task_complete> again."
	}
	return q + `"task_complete": true in your JSON response again.`
}

// errorBlock tells the agent why its response was refused.
func errorBlock(r Response, format Format) string {
	var b strings.Builder
	b.WriteString("Previous response had parsing errors:\n")
	for _, e := range r.Errors {
		b.WriteString("ERROR: ")
		b.WriteString(e)
		b.WriteString("\n")
	}
	if len(r.Warnings) > 0 {
		b.WriteString("WARNINGS: - ")
		b.WriteString(strings.Join(r.Warnings, "\n- "))
		b.WriteString("\n")
	}
	b.WriteString("\nNothing was typed. Please fix these issues and provide a proper ")
	if format == FormatXML {
		b.WriteString("response.")
	} else {
		b.WriteString("JSON response.")
	}
	return b.String()
}

// warningBlock passes a response's warnings on with the next state.
func warningBlock(r Response) string {
	return "Previous response had warnings:\nWARNINGS: - " + strings.Join(r.Warnings, "\n- ")
}

// capObservation limits screen to max bytes, keeping its head and tail
// and replacing the middle by a marker saying how many bytes were cut.
func capObservation(screen string, max int) string {
	if max <= 0 || len(screen) <= max {
		return screen
	}
	half := max / 2
	head := screen[:half]
	for i := 0; i < utf8.UTFMax-1 && len(head) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(head); r != utf8.RuneError || size > 1 {
			break
		}
		head = head[:len(head)-1]
	}
	tail := screen[len(screen)-half:]
	for i := 0; i < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	cut := len(screen) - len(head) - len(tail)
	return fmt.Sprintf("%s\n[... output limited to %d bytes; %d interior bytes omitted ...]\n%s", head, max, cut, tail)
}

// summarize describes a response's commands for a progress line.
func summarize(r Response) string {
	if len(r.Commands) == 0 {
		if r.TaskComplete {
			return "says the task is complete"
		}
		return "no commands"
	}
	parts := make([]string, 0, len(r.Commands))
	for _, c := range r.Commands {
		parts = append(parts, shortKeys(c))
	}
	return clip(strings.Join(parts, "; "), 60)
}

func shortKeys(c Command) string {
	switch {
	case c.Keystrokes == "":
		return "wait " + c.Duration.Round(100*time.Millisecond).String()
	case IsKey(c.Keystrokes):
		return c.Keystrokes
	}
	s := strings.TrimRight(c.Keystrokes, "\n")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			r = '·'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
