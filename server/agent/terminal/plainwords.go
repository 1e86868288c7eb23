package terminal

import "strings"

// PlainWords splits command into its words when sh would do nothing with
// it but split it and run the first word as a program (the rule of the
// terminal runner's commands, see splitCommand), so that a caller can run
// it without a shell; ok is false when it needs the shell or holds
// {message}. The long-lived runners (ACP) use it too.
func PlainWords(command string) (words []string, ok bool) {
	if strings.Contains(command, placeholder) {
		return nil, false
	}
	t, ok := splitCommand(command)
	if !ok || len(t) == 0 {
		return nil, false
	}
	return t.argv(""), true
}
