package harness

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Durations of a command: the wait after its keystrokes is clamped to
// MinDuration..MaxDuration, and is DefaultDuration when missing or invalid.
const (
	MinDuration     = 100 * time.Millisecond
	MaxDuration     = 60 * time.Second
	DefaultDuration = time.Second
)

// Format is the syntax of an agent's response.
type Format int

// The response formats of the Term Challenge protocol.
const (
	FormatUnknown Format = iota // neither was found
	FormatJSON
	FormatXML
)

// String returns "json", "xml" or "unknown".
func (f Format) String() string {
	switch f {
	case FormatJSON:
		return "json"
	case FormatXML:
		return "xml"
	}
	return "unknown"
}

// Command is one entry of a response's commands.
type Command struct {
	Keystrokes string        // a key name (see IsKey) or text typed as is; "" is a poll
	Duration   time.Duration // wait after sending, MinDuration..MaxDuration
}

// Response is a parsed agent response. When Errors is not empty nothing
// of it runs: the agent is asked again with the errors. Warnings are shown
// to the agent with the next terminal state.
type Response struct {
	Format       Format
	Analysis     string
	Plan         string
	Commands     []Command
	TaskComplete bool
	Errors       []string
	Warnings     []string
}

// maxMessages is the most errors (and warnings) a response keeps; the
// rest are counted in a last message.
const maxMessages = 20

func limitMessages(list []string) []string {
	if len(list) <= maxMessages {
		return list
	}
	n := len(list) - (maxMessages - 1)
	return append(list[:maxMessages-1:maxMessages-1], fmt.Sprintf("... and %d more", n))
}

// OK reports whether the response has no errors.
func (r *Response) OK() bool { return len(r.Errors) == 0 }

func (r *Response) errorf(format string, a ...any) {
	r.Errors = append(r.Errors, fmt.Sprintf(format, a...))
}
func (r *Response) warnf(format string, a ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, a...))
}

// Parse parses a response in either format: XML when a <response> tag comes
// before the first '{', JSON otherwise.
func Parse(text string) Response {
	brace := strings.IndexByte(text, '{')
	tag, _, _ := findOpen(text, "response", 0, nil)
	switch {
	case tag >= 0 && (brace < 0 || tag < brace):
		return ParseXML(text)
	case brace >= 0:
		return ParseJSON(text)
	}
	r := Response{Format: FormatUnknown}
	if strings.TrimSpace(text) == "" {
		r.errorf("Empty response: print one JSON object (or one <response> block) on stdout")
	} else {
		r.errorf("No JSON object or <response> block found in the response (it starts %s)", preview(text, 60))
	}
	return r
}

// preview quotes the start of s, at most n bytes (on a rune boundary).
func preview(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "..."
}

// ---- JSON

var jsonFields = []string{"analysis", "plan", "commands", "task_complete"}

// maxJSONCandidates bounds how many '{' are tried as the start of the
// response object.
const maxJSONCandidates = 16

// ParseJSON parses a JSON response. It is as tolerant as terminus-2's
// parser: text around the object and missing closing braces are warnings;
// a missing or invalid duration is a warning and waits 1 s; unknown fields
// are warnings. A missing analysis, plan or commands, commands that is not
// an array, and a command that is not an object or lacks string keystrokes
// are errors.
func ParseJSON(text string) Response { return limited(parseJSON(text)) }

// limited caps a response's errors and warnings.
func limited(r Response) Response {
	r.Errors, r.Warnings = limitMessages(r.Errors), limitMessages(r.Warnings)
	return r
}

func parseJSON(text string) Response {
	r := Response{Format: FormatJSON}
	obj, start, end, fix, err := extractJSON(text)
	if err != "" {
		r.Errors = append(r.Errors, err)
		return r
	}
	if fix != "" {
		r.warnf("AUTO-CORRECTED: %s - please fix this in future responses", fix)
	}
	if strings.TrimSpace(text[:start]) != "" {
		r.warnf("Extra text detected before JSON object")
	}
	if strings.TrimSpace(text[end:]) != "" {
		r.warnf("Extra text detected after JSON object")
	}

	var unknown, missing []string
	for k := range obj {
		if !slices.Contains(jsonFields, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		r.warnf("Unknown fields: %s", nameList(unknown))
	}
	r.checkFieldOrder(jsonKeyOrder(text[start:end]))
	r.TaskComplete = jsonComplete(&r, obj["task_complete"])
	for _, f := range []string{"analysis", "plan", "commands"} {
		if _, ok := obj[f]; !ok {
			if f == "commands" && r.TaskComplete {
				r.warnf("Field 'commands' is missing; nothing was typed")
				continue
			}
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		r.errorf("Missing required fields: %s", strings.Join(missing, ", "))
	}
	r.Analysis = jsonText(&r, "analysis", obj["analysis"])
	r.Plan = jsonText(&r, "plan", obj["plan"])

	raw, ok := obj["commands"]
	if !ok {
		return r
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || isNull(raw) {
		r.errorf("Field 'commands' must be an array of {\"keystrokes\", \"duration\"} objects, got %s", jsonKind(raw))
		return r
	}
	var cmdErrs []string
	for i, item := range list {
		n := i + 1
		var c map[string]json.RawMessage
		if err := json.Unmarshal(item, &c); err != nil || isNull(item) {
			cmdErrs = append(cmdErrs, fmt.Sprintf("Command %d must be an object, got %s", n, jsonKind(item)))
			continue
		}
		ks, ok := c["keystrokes"]
		if !ok {
			cmdErrs = append(cmdErrs, fmt.Sprintf("Command %d missing required 'keystrokes' field", n))
			continue
		}
		var keys string
		if err := json.Unmarshal(ks, &keys); err != nil || isNull(ks) {
			cmdErrs = append(cmdErrs, fmt.Sprintf("Command %d 'keystrokes' must be a string, got %s", n, jsonKind(ks)))
			continue
		}
		var unknown []string
		for k := range c {
			if k != "keystrokes" && k != "duration" {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			r.warnf("Command %d: Unknown fields: %s", n, nameList(unknown))
		}
		secs, present, valid := jsonDuration(c["duration"])
		cmd := Command{Keystrokes: keys, Duration: clampDuration(&r, n, secs, present, valid)}
		checkKeystrokes(&r, n, keys, i < len(list)-1)
		r.Commands = append(r.Commands, cmd)
	}
	if len(cmdErrs) > 0 {
		if r.TaskComplete {
			// As terminus-2: a completing response's bad commands are
			// only warned about.
			r.Warnings = append(r.Warnings, cmdErrs...)
			r.Commands = nil
		} else {
			r.Errors = append(r.Errors, cmdErrs...)
		}
	}
	if !r.OK() {
		r.Commands = nil
	}
	return r
}

// extractJSON finds the response object in text: the first '{' that starts
// a balanced, valid object (preferring one with a known field), closing
// braces and brackets left open at the end of text. It returns the decoded
// object and its span in text, a note when it had to repair it, or an
// error message.
func extractJSON(text string) (obj map[string]json.RawMessage, start, end int, fix, errMsg string) {
	type cand struct {
		obj        map[string]json.RawMessage
		start, end int
		fix        string
	}
	var first *cand
	var firstErr string
	from := 0
	for range maxJSONCandidates {
		i := strings.IndexByte(text[from:], '{')
		if i < 0 {
			break
		}
		i += from
		from = i + 1
		body, j, closers := scanJSON(text, i)
		var note string
		if closers != "" {
			body += closers
			note = fmt.Sprintf("Fixed incomplete JSON by adding missing %s", describeClosers(closers))
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			if firstErr == "" {
				firstErr = fmt.Sprintf("Invalid JSON: %v | Content preview: %s", err, preview(body, 100))
			}
			continue
		}
		c := &cand{m, i, j, note}
		for _, f := range jsonFields {
			if _, ok := m[f]; ok {
				return c.obj, c.start, c.end, c.fix, ""
			}
		}
		if first == nil {
			first = c
		}
	}
	if first != nil {
		return first.obj, first.start, first.end, first.fix, ""
	}
	if firstErr != "" {
		return nil, 0, 0, "", firstErr
	}
	if strings.TrimSpace(text) == "" {
		return nil, 0, 0, "", "Empty response: print one JSON object on stdout"
	}
	return nil, 0, 0, "", fmt.Sprintf("No valid JSON found in response (it starts %s)", preview(text, 60))
}

// scanJSON scans the value starting at the '{' at text[i], skipping
// strings. It returns the object's text and where it ends; when text ends
// first, closers holds what would close the brackets still open.
func scanJSON(text string, i int) (body string, end int, closers string) {
	var stack []byte
	inString, escaped := false, false
	for j := i; j < len(text); j++ {
		c := text[j]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{':
			stack = append(stack, '}')
		case '[':
			stack = append(stack, ']')
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 {
				return text[i : j+1], j + 1, ""
			}
		}
	}
	slices.Reverse(stack)
	return text[i:], len(text), string(stack)
}

// describeClosers words the repair as terminus-2 does ("closing brace",
// whatever the count); terminus-2 never closes brackets, so those get the
// nearest wording.
func describeClosers(c string) string {
	braces := strings.Count(c, "}")
	switch {
	case braces == len(c):
		return "closing brace"
	case braces == 0:
		return "closing bracket"
	}
	return "closing brace and bracket"
}

// nameList lists field names as terminus-2 does ("a, b", unquoted); a
// name that would not read back unambiguously (empty, or with a comma,
// space, quote or control character) is quoted.
func nameList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = n
		if n == "" || strings.ContainsFunc(n, func(r rune) bool {
			return r == ',' || r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r)
		}) {
			q[i] = strconv.Quote(n)
		}
	}
	return strings.Join(q, ", ")
}

func isNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

// jsonKind names the JSON type of raw, for messages.
func jsonKind(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// jsonText returns a string field; another type is a warning and is kept
// as its JSON text.
func jsonText(r *Response, name string, raw json.RawMessage) string {
	if raw == nil {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || isNull(raw) {
		r.warnf("Field '%s' should be a string, got %s", name, jsonKind(raw))
		if isNull(raw) {
			return ""
		}
		return string(raw)
	}
	return s
}

func jsonComplete(r *Response, raw json.RawMessage) bool {
	if raw == nil {
		return false
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err == nil && !isNull(raw) {
		return b
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && !isNull(raw) {
		v, ok := truthy(s)
		if ok {
			r.warnf("Field 'task_complete' should be a boolean, got the string %q", s)
			return v
		}
	}
	if !isNull(raw) && !strings.HasPrefix(strings.TrimSpace(string(raw)), `"`) {
		// terminus-2's words for a task_complete of another type.
		r.warnf("Field 'task_complete' should be a boolean or string")
		return false
	}
	r.warnf("Field 'task_complete' should be true or false, got %s; taken as false", jsonKind(raw))
	return false
}

func truthy(s string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return true, true
	case "false", "0", "no", "":
		return false, true
	}
	return false, false
}

// jsonDuration reads a duration in seconds: a number, or a string holding
// one.
func jsonDuration(raw json.RawMessage) (secs float64, present, valid bool) {
	if raw == nil {
		return 0, false, false
	}
	if err := json.Unmarshal(raw, &secs); err == nil && !isNull(raw) {
		return secs, true, true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true, true
		}
	}
	return 0, true, false
}

// clampDuration turns seconds into a Duration within MinDuration ..
// MaxDuration, warning about missing, invalid and out-of-range values.
func clampDuration(r *Response, n int, secs float64, present, valid bool) time.Duration {
	switch {
	case !present:
		r.warnf("Command %d: Missing duration field, using default 1.0", n)
		return DefaultDuration
	case !valid:
		r.warnf("Command %d: Invalid duration value, using default 1.0", n)
		return DefaultDuration
	case secs < MinDuration.Seconds():
		if secs < 0 {
			r.warnf("Command %d: duration %g is negative; waiting %g s", n, secs, MinDuration.Seconds())
		}
		return MinDuration
	case secs > MaxDuration.Seconds():
		r.warnf("Command %d: duration %g is longer than %g s; waiting %g s (poll with an empty command to wait longer)",
			n, secs, MaxDuration.Seconds(), MaxDuration.Seconds())
		return MaxDuration
	}
	return time.Duration(secs * float64(time.Second))
}

// checkKeystrokes warns about keystrokes that probably do not do what the
// agent meant.
func checkKeystrokes(r *Response, n int, keys string, followed bool) {
	if t := strings.TrimSpace(keys); t != keys && IsKey(t) {
		r.warnf("Command %d: keystrokes %q are typed as text; to press the key, give exactly %q", n, keys, t)
		return
	}
	if followed && keys != "" && !IsKey(keys) && !strings.HasSuffix(keys, "\n") {
		r.warnf("Command %d should end with newline when followed by another command. "+
			"Otherwise the two commands will be concatenated together on the same line.", n)
	}
}

// orderedFields is the order terminus-2 expects the fields in.
var orderedFields = []string{"analysis", "plan", "commands"}

// checkFieldOrder warns, as terminus-2 does, when the orderedFields among
// found (the fields in the order the response gives them) are out of
// order.
func (r *Response) checkFieldOrder(found []string) {
	var got, want []string
	for _, f := range found {
		if slices.Contains(orderedFields, f) && !slices.Contains(got, f) {
			got = append(got, f)
		}
	}
	for _, f := range orderedFields {
		if slices.Contains(got, f) {
			want = append(want, f)
		}
	}
	if !slices.Equal(got, want) {
		r.warnf("Fields appear in wrong order. Found: %s, expected: %s", strings.Join(got, " -> "), strings.Join(want, " -> "))
	}
}

// jsonKeyOrder lists the top-level keys of the JSON object that obj
// starts with, in the order they are written, as far as it can be read
// (an object missing its closing braces still yields its keys).
func jsonKeyOrder(obj string) []string {
	dec := json.NewDecoder(strings.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		k, ok := t.(string)
		if !ok {
			break
		}
		keys = append(keys, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			break
		}
	}
	return keys
}

// ---- XML

var xmlSections = []string{"analysis", "plan", "commands", "task_complete"}

// ParseXML parses an XML response (a <response> block). It is as
// tolerant as terminus-2's parser: text around the block, a missing
// </response> and a missing or invalid duration are warnings; unknown
// sections and elements are warnings; so are a missing <analysis> or
// <plan> (terminus-2 runs the commands anyway) and sections out of the
// order analysis, plan, commands. A missing <commands> (unless the task
// is complete), <commands> without <command> elements, and a command
// without <keystrokes> are errors. Keystrokes are
// taken verbatim (a CDATA section is unwrapped); a duration is a
// <duration> element or a duration attribute of <command> or <keystrokes>.
func ParseXML(text string) Response { return limited(parseXML(text)) }

func parseXML(text string) Response {
	r := Response{Format: FormatXML}
	open, contentStart, self := findOpen(text, "response", 0, nil)
	if open < 0 {
		r.errorf("No <response> tag found")
		return r
	}
	content := ""
	if !self {
		if end := strings.Index(text[contentStart:], "</response>"); end >= 0 {
			content = text[contentStart : contentStart+end]
			after := text[contentStart+end+len("</response>"):]
			if strings.TrimSpace(after) != "" {
				r.warnf("Extra text detected after </response> tag")
				if n := strings.Count(text, "<response>"); n > 1 {
					r.warnf("IMPORTANT: Only issue one <response> block at a time. You issued %d and only the first was used.", n)
				}
			}
		} else {
			content = text[contentStart:]
			r.warnf("AUTO-CORRECTED: Missing </response> tag was automatically inserted - please fix this in future responses")
		}
	}
	if strings.TrimSpace(text[:open]) != "" {
		r.warnf("Extra text detected before <response> tag")
	}

	type section struct {
		inner string
		found bool
		at    int // offset of the opening tag
	}
	secs := map[string]section{}
	var spans [][2]int
	var missing []string
	for _, name := range xmlSections {
		inner, span, found, err := findElement(content, name, spans)
		if err != "" {
			r.Errors = append(r.Errors, err)
			found = true // reported; not also "missing"
		}
		if found {
			spans = append(spans, span)
		}
		secs[name] = section{inner, found, span[0]}
	}
	for _, tag := range unknownTags(content, spans) {
		r.warnf("Unknown section <%s> ignored", tag)
	}

	if tc := secs["task_complete"]; tc.found {
		v, ok := truthy(tc.inner)
		if !ok {
			r.warnf("<task_complete> should be true or false, got %s; taken as false", preview(strings.TrimSpace(tc.inner), 40))
		} else if t := strings.ToLower(strings.TrimSpace(tc.inner)); t != "true" && t != "false" && t != "" {
			r.warnf("<task_complete> should be true or false, got %q", strings.TrimSpace(tc.inner))
		}
		r.TaskComplete = v
	}
	for _, name := range []string{"analysis", "plan"} {
		if !secs[name].found {
			r.warnf("Missing <%s> section", name)
		}
	}
	if !secs["commands"].found && !r.TaskComplete {
		missing = append(missing, "<commands>")
	}
	if len(missing) > 0 {
		for _, m := range missing {
			r.errorf("Missing %s section", m) // terminus-2's words
		}
	}
	var order []string
	for _, name := range orderedFields {
		if secs[name].found {
			order = append(order, name)
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return secs[a].at - secs[b].at })
	r.checkFieldOrder(order)
	r.Analysis = unescapeXML(strings.TrimSpace(secs["analysis"].inner))
	r.Plan = unescapeXML(strings.TrimSpace(secs["plan"].inner))

	if c := secs["commands"]; c.found {
		cmdErrs := parseXMLCommands(&r, c.inner)
		if len(cmdErrs) > 0 {
			if r.TaskComplete {
				r.Warnings = append(r.Warnings, cmdErrs...)
				r.Commands = nil
			} else {
				r.Errors = append(r.Errors, cmdErrs...)
			}
		}
	}
	if !r.OK() {
		r.Commands = nil
	}
	return r
}

func parseXMLCommands(r *Response, content string) (errs []string) {
	type raw struct {
		keys, dur string
		hasKeys   bool
		hasDur    bool
	}
	var cmds []raw
	pos := 0
	// The next <command> and bare <keystrokes>, found again only when
	// passed, so that many commands do not make the scan quadratic.
	ci, cStart, cSelf := findOpen(content, "command", 0, nil)
	ki, _, _ := findOpen(content, "keystrokes", 0, nil)
	for {
		if ci >= 0 && ci < pos {
			ci, cStart, cSelf = findOpen(content, "command", pos, nil)
		}
		if ki >= 0 && ki < pos {
			ki, _, _ = findOpen(content, "keystrokes", pos, nil)
		}
		n := len(cmds) + 1
		if ci < 0 && ki < 0 {
			if rest := strings.TrimSpace(stripComments(content[pos:])); rest != "" && len(cmds) == 0 {
				errs = append(errs, fmt.Sprintf("<commands> must hold <command> elements, each with a <keystrokes> element; found %s", preview(rest, 60)))
			}
			break
		}
		if ki >= 0 && (ci < 0 || ki < ci) {
			// terminus-2 style: <keystrokes duration="0.1">...</keystrokes>
			// directly inside <commands>.
			keys, dur, hasDur, next, err := xmlKeystrokes(content, ki, n)
			if err != "" {
				errs = append(errs, err)
				return errs
			}
			cmds = append(cmds, raw{keys: keys, dur: dur, hasKeys: true, hasDur: hasDur})
			pos = next
			continue
		}
		c := raw{}
		if d, ok := attr(content[ci:cStart], "duration"); ok {
			c.dur, c.hasDur = d, true
		}
		if cSelf {
			errs = append(errs, fmt.Sprintf("Command %d missing required <keystrokes> element", n))
			cmds = append(cmds, c)
			pos = cStart
			continue
		}
		end := strings.Index(content[cStart:], "</command>")
		if end < 0 {
			errs = append(errs, fmt.Sprintf("Command %d: <command> is not closed (missing </command>)", n))
			return errs
		}
		body := content[cStart : cStart+end]
		pos = cStart + end + len("</command>")
		var spans [][2]int
		if k, _, _ := findOpen(body, "keystrokes", 0, nil); k >= 0 {
			keys, dur, hasDur, next, err := xmlKeystrokes(body, k, n)
			if err != "" {
				errs = append(errs, err)
				cmds = append(cmds, c)
				continue
			}
			c.keys, c.hasKeys = keys, true
			if hasDur {
				c.dur, c.hasDur = dur, true
			}
			spans = append(spans, [2]int{k, next})
		} else {
			errs = append(errs, fmt.Sprintf("Command %d missing required <keystrokes> element", n))
		}
		if inner, span, found, err := findElement(body, "duration", spans); err != "" {
			r.warnf("Command %d: %s", n, err)
		} else if found {
			c.dur, c.hasDur = inner, true
			spans = append(spans, span)
		}
		for _, tag := range unknownTags(body, spans) {
			r.warnf("Command %d: Unknown element <%s> ignored", n, tag)
		}
		cmds = append(cmds, c)
	}
	if len(errs) > 0 {
		return errs
	}
	for i, c := range cmds {
		n := i + 1
		var secs float64
		valid := false
		if c.hasDur {
			if f, err := strconv.ParseFloat(strings.TrimSpace(c.dur), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				secs, valid = f, true
			}
		}
		d := clampDuration(r, n, secs, c.hasDur, valid)
		checkKeystrokes(r, n, c.keys, i < len(cmds)-1)
		if strings.Contains(c.keys, "&lt;") || strings.Contains(c.keys, "&gt;") || strings.Contains(c.keys, "&amp;") {
			r.warnf("Command %d: keystrokes are typed verbatim, so XML entities (&lt; &gt; &amp;) are typed as they are written; write < > & themselves or use a CDATA section", n)
		}
		r.Commands = append(r.Commands, Command{Keystrokes: c.keys, Duration: d})
	}
	return nil
}

// xmlKeystrokes reads the <keystrokes> element opening at s[i]: its text
// (verbatim; CDATA unwrapped), its duration attribute, and where it ends.
func xmlKeystrokes(s string, i, n int) (keys, dur string, hasDur bool, next int, err string) {
	_, start, self := findOpen(s, "keystrokes", i, nil)
	dur, hasDur = attr(s[i:start], "duration")
	if self {
		return "", dur, hasDur, start, ""
	}
	body := s[start:]
	if strings.HasPrefix(body, "<![CDATA[") {
		end := strings.Index(body, "]]>")
		if end < 0 {
			return "", "", false, 0, fmt.Sprintf("Command %d: <keystrokes> CDATA section is not closed (missing ]]>)", n)
		}
		keys = body[len("<![CDATA["):end]
		rest := body[end+3:]
		closing := strings.Index(rest, "</keystrokes>")
		if closing < 0 {
			return "", "", false, 0, fmt.Sprintf("Command %d: <keystrokes> is not closed (missing </keystrokes>)", n)
		}
		return keys, dur, hasDur, start + end + 3 + closing + len("</keystrokes>"), ""
	}
	end := strings.Index(body, "</keystrokes>")
	if end < 0 {
		return "", "", false, 0, fmt.Sprintf("Command %d: <keystrokes> is not closed (missing </keystrokes>)", n)
	}
	return body[:end], dur, hasDur, start + end + len("</keystrokes>"), ""
}

// findOpen finds the first opening tag <name>, <name ...> or <name/> at or
// after from that is not inside one of skip. It returns where the tag
// starts and ends (-1, 0 if none) and whether it closes itself.
func findOpen(s, name string, from int, skip [][2]int) (start, end int, self bool) {
	pat := "<" + name
	for from <= len(s) {
		i := strings.Index(s[from:], pat)
		if i < 0 {
			return -1, 0, false
		}
		i += from
		from = i + 1
		j := i + len(pat)
		if j < len(s) && s[j] != '>' && s[j] != '/' && !isSpace(s[j]) {
			continue // a longer name, e.g. <commands> for <command>
		}
		if inSpans(i, skip) {
			continue
		}
		gt := strings.IndexByte(s[j:], '>')
		if gt < 0 {
			return -1, 0, false
		}
		end := j + gt + 1
		return i, end, s[end-2] == '/'
	}
	return -1, 0, false
}

// findElement finds element name outside skip and returns its inner text
// and span. A tag without its closing tag is an error message.
func findElement(s, name string, skip [][2]int) (inner string, span [2]int, found bool, errMsg string) {
	i, start, self := findOpen(s, name, 0, skip)
	if i < 0 {
		return "", span, false, ""
	}
	if self {
		return "", [2]int{i, start}, true, ""
	}
	closeTag := "</" + name + ">"
	end := strings.Index(s[start:], closeTag)
	if end < 0 {
		return "", [2]int{i, start}, false, fmt.Sprintf("<%s> is not closed (missing %s)", name, closeTag)
	}
	return s[start : start+end], [2]int{i, start + end + len(closeTag)}, true, ""
}

func inSpans(i int, spans [][2]int) bool {
	for _, sp := range spans {
		if i >= sp[0] && i < sp[1] {
			return true
		}
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// unknownTags lists (once each, at most 5) the opening tags in s outside
// spans.
func unknownTags(s string, spans [][2]int) []string {
	var out []string
	for i := 0; i < len(s) && len(out) < 5; i++ {
		if s[i] != '<' || inSpans(i, spans) {
			continue
		}
		j := i + 1
		if j >= len(s) || !isNameByte(s[j]) {
			continue
		}
		for j < len(s) && (isNameByte(s[j]) || s[j] == '-' || s[j] == '.' || (s[j] >= '0' && s[j] <= '9')) {
			j++
		}
		if !(j == len(s) || s[j] == '>' || s[j] == '/' || isSpace(s[j])) {
			continue
		}
		if tag := s[i+1 : j]; !slices.Contains(out, tag) {
			out = append(out, tag)
		}
	}
	return out
}

func isNameByte(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// attr returns the value of attribute name in an opening tag.
func attr(tag, name string) (string, bool) {
	for i := 0; ; {
		j := strings.Index(tag[i:], name)
		if j < 0 {
			return "", false
		}
		j += i
		i = j + len(name)
		if j == 0 || !isSpace(tag[j-1]) {
			continue
		}
		k := i
		for k < len(tag) && isSpace(tag[k]) {
			k++
		}
		if k >= len(tag) || tag[k] != '=' {
			continue
		}
		k++
		for k < len(tag) && isSpace(tag[k]) {
			k++
		}
		if k >= len(tag) || (tag[k] != '"' && tag[k] != '\'') {
			continue
		}
		q := tag[k]
		end := strings.IndexByte(tag[k+1:], q)
		if end < 0 {
			return "", false
		}
		return tag[k+1 : k+1+end], true
	}
}

func stripComments(s string) string {
	for {
		i := strings.Index(s, "<!--")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], "-->")
		if j < 0 {
			return s[:i]
		}
		s = s[:i] + s[i+j+3:]
	}
}

var xmlEntities = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&quot;", `"`, "&apos;", "'", "&amp;", "&")

func unescapeXML(s string) string { return xmlEntities.Replace(s) }
