package terminal

import "strings"

// placeholder is the command template's stand-in for the message text.
const placeholder = "{message}"

// argvTemplate is a command template with no shell syntax, split into
// words: the program and its arguments, run without "sh -c" (see
// splitCommand).
type argvTemplate [][]wordPart

// wordPart is a piece of a word: literal text, or the message.
type wordPart struct {
	lit     string
	message bool
}

// argv returns the words with each placeholder replaced by text, NUL
// bytes dropped (as ShellQuote drops them): what sh would pass the
// program for the same template expanded by ExpandCommand.
func (t argvTemplate) argv(text string) []string {
	text = strings.ReplaceAll(text, "\x00", "")
	out := make([]string, len(t))
	for i, parts := range t {
		var b strings.Builder
		for _, p := range parts {
			if p.message {
				b.WriteString(text)
			} else {
				b.WriteString(p.lit)
			}
		}
		out[i] = b.String()
	}
	return out
}

// splitCommand splits a command template into words when sh would do
// nothing with it but split it into words and run the first as a
// program; ok is false when the shell must run it.
//
// The rule is conservative. Words are separated by spaces and tabs and
// made of:
//   - the unquoted characters A-Z a-z 0-9 and _ - . / , : + @ % =
//   - {message} (outside quotes: ExpandCommand makes it one quoted word
//     part holding the text, so here it is the text as it is);
//   - 'single-quoted text' that holds no {message} (the text in it is
//     literal; ExpandCommand would quote the text inside the quotes).
//
// Anything else needs the shell: double quotes, backslashes, $, `, |, &,
// ;, <, >, (, ), *, ?, [, ], {, }, ~, #, !, newlines, non-ASCII bytes, an
// unterminated quote. So does a first word that is empty, holds the
// placeholder or an "=" (an assignment), or is a reserved word or
// builtin of sh (see shellWords).
func splitCommand(template string) (argvTemplate, bool) {
	var words argvTemplate
	var cur []wordPart
	inWord := false
	lit := func(s string) {
		if n := len(cur); n > 0 && !cur[n-1].message {
			cur[n-1].lit += s
		} else {
			cur = append(cur, wordPart{lit: s})
		}
	}
	for i := 0; i < len(template); {
		c := template[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur)
				cur, inWord = nil, false
			}
			i++
			continue
		case strings.HasPrefix(template[i:], placeholder):
			cur = append(cur, wordPart{message: true})
			i += len(placeholder)
		case c == '\'':
			end := strings.IndexByte(template[i+1:], '\'')
			if end < 0 {
				return nil, false
			}
			quoted := template[i+1 : i+1+end]
			if strings.Contains(quoted, placeholder) {
				return nil, false
			}
			lit(quoted)
			i += end + 2
		case plainByte(c):
			lit(string(c))
			i++
		default:
			return nil, false
		}
		inWord = true
	}
	if inWord {
		words = append(words, cur)
	}
	if len(words) == 0 {
		return nil, false
	}
	for _, p := range words[0] {
		if p.message {
			return nil, false
		}
	}
	program := words.argv("")[0]
	if program == "" || strings.Contains(program, "=") || shellWords[program] {
		return nil, false
	}
	return words, true
}

// plainByte tells whether c means itself to sh outside quotes, wherever
// it stands in a word.
func plainByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("_-./,:+@%=", c) >= 0
}

// shellWords are the reserved words and builtins of POSIX sh, dash and
// bash (which may be /bin/sh): as a command's first word they are not a
// program to exec, so such a command keeps the shell.
var shellWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		! { } [ [[ ]] case coproc do done elif else esac fi for function if in select then time until while
		. : alias bg bind break builtin caller cd chdir command compgen complete compopt continue declare
		dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill let
		local logout mapfile newgrp popd printf pushd pwd read readarray readonly return set shift shopt
		source suspend test times trap true type typeset ulimit umask unalias unset wait`) {
		m[w] = true
	}
	return m
}()
