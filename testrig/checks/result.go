package checks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Result is what one check found.
type Result struct {
	// Name is the check's command name: "serial-loopback", "lcd-test", ...
	Name string
	// Pass is the verdict. A skipped check passes.
	Pass bool
	// Skipped is set when the check did not run; Summary says why. Unless
	// NotApplicable is set too, it could run with what Summary asks for
	// (a jumper, wired pins, a person, a server).
	Skipped bool
	// NotApplicable marks a skipped check that does not apply to the
	// board (no keypad, no I²C LCD).
	NotApplicable bool
	// Summary is the verdict in one line, the reason first when it failed:
	// "nothing received: is TX wired to RX?".
	Summary string
	// Details are further lines for a person: per-step figures, hints.
	Details []string
	// Metrics are the figures a script reads, in the order they were added.
	Metrics []Metric
}

// Metric is one measured figure. Name carries the unit as a suffix
// (ping_p50_ms, fps, bytes_sent) so that JSON readers need nothing else.
type Metric struct {
	Name  string
	Value float64
}

// newResult returns a passing Result named name.
func newResult(name string) *Result { return &Result{Name: name, Pass: true} }

// Detailf adds a detail line.
func (r *Result) Detailf(format string, a ...any) {
	r.Details = append(r.Details, fmt.Sprintf(format, a...))
}

// Set sets metric name to v, adding it when new.
func (r *Result) Set(name string, v float64) {
	for i := range r.Metrics {
		if r.Metrics[i].Name == name {
			r.Metrics[i].Value = v
			return
		}
	}
	r.Metrics = append(r.Metrics, Metric{name, v})
}

// Metric returns the value of metric name and whether it is set.
func (r *Result) Metric(name string) (float64, bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// Fail marks r failed with summary; a failure already recorded keeps its
// summary (the first reason is usually the cause) and summary becomes a
// detail.
func (r *Result) Fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if !r.Pass && r.Summary != "" {
		r.Details = append(r.Details, msg)
		return
	}
	r.Pass, r.Summary = false, msg
}

// Status is "PASS", "FAIL", "SKIP" or "N/A" (not applicable).
func (r *Result) Status() string {
	switch {
	case r.NotApplicable:
		return "N/A"
	case r.Skipped:
		return "SKIP"
	case r.Pass:
		return "PASS"
	}
	return "FAIL"
}

// WriteText writes r for a person:
//
//	PASS i2c-scan: 1 device answers: 0x27 (PCF8574 LCD backpack)
//	  detail...
//	  metric_name  1.5
func (r *Result) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s: %s\n", r.Status(), r.Name, r.Summary)
	for _, d := range r.Details {
		for _, line := range strings.Split(d, "\n") {
			fmt.Fprintf(&b, "  %s\n", line)
		}
	}
	width := 0
	for _, m := range r.Metrics {
		width = max(width, len(m.Name))
	}
	for _, m := range r.Metrics {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, m.Name, FormatValue(m.Value))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// FormatValue formats a metric: whole numbers without decimals, others
// with up to three significant decimals.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// MarshalJSON writes r as
//
//	{"name":"lcd-test","pass":true,"skipped":false,"summary":"...",
//	 "details":["..."],"metrics":{"fps":61.2,"i2c_errors":0}}
//
// with the metrics in the order they were added. NaN and infinite values
// (which JSON cannot hold) are written as null.
func (r Result) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"name":`)
	writeJSON(&b, r.Name)
	b.WriteString(`,"pass":`)
	b.WriteString(strconv.FormatBool(r.Pass))
	b.WriteString(`,"skipped":`)
	b.WriteString(strconv.FormatBool(r.Skipped))
	if r.NotApplicable {
		b.WriteString(`,"not_applicable":true`)
	}
	b.WriteString(`,"summary":`)
	writeJSON(&b, r.Summary)
	b.WriteString(`,"details":`)
	if r.Details == nil {
		b.WriteString("[]")
	} else {
		writeJSON(&b, r.Details)
	}
	b.WriteString(`,"metrics":{`)
	for i, m := range r.Metrics {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(&b, m.Name)
		b.WriteByte(':')
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			b.WriteString("null")
		} else {
			writeJSON(&b, m.Value)
		}
	}
	b.WriteString("}}")
	return b.Bytes(), nil
}

// writeJSON appends v as JSON, without escaping <, > and & (the output is
// for terminals and scripts, not HTML).
func writeJSON(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // strings, string slices and finite floats always encode
		panic(err)
	}
	b.Truncate(b.Len() - 1) // Encode's newline
}

// UnmarshalJSON reads what MarshalJSON writes (metrics in key order).
func (r *Result) UnmarshalJSON(data []byte) error {
	var raw struct {
		Name    string          `json:"name"`
		Pass    bool            `json:"pass"`
		Skipped bool            `json:"skipped"`
		NA      bool            `json:"not_applicable"`
		Summary string          `json:"summary"`
		Details []string        `json:"details"`
		Metrics json.RawMessage `json:"metrics"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*r = Result{Name: raw.Name, Pass: raw.Pass, Skipped: raw.Skipped, NotApplicable: raw.NA, Summary: raw.Summary, Details: raw.Details}
	if len(raw.Metrics) == 0 || string(raw.Metrics) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw.Metrics))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		var v *float64
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("metric %s: %w", name, err)
		}
		if v == nil {
			r.Metrics = append(r.Metrics, Metric{name, math.NaN()})
		} else {
			r.Metrics = append(r.Metrics, Metric{name, *v})
		}
	}
	return nil
}

// Verdicts of a Report.
const (
	VerdictPass       = "PASS"       // every check that applies ran and passed
	VerdictFail       = "FAIL"       // a check failed
	VerdictIncomplete = "INCOMPLETE" // nothing failed, but checks were skipped for lack of a stand-in
)

// Report is the outcome of several checks (the selftest).
type Report struct {
	// Verdict is VerdictPass, VerdictFail or VerdictIncomplete.
	Verdict string `json:"verdict"`
	// Pass is Verdict == VerdictPass.
	Pass bool `json:"pass"`
	// The checks by outcome; Skipped counts those that could have run,
	// NotApplicable those that do not apply to the board.
	Passed        int      `json:"passed"`
	Failed        int      `json:"failed"`
	Skipped       int      `json:"skipped"`
	NotApplicable int      `json:"not_applicable"`
	Results       []Result `json:"checks"`
}

// Add appends r and updates the counts and the verdict: FAIL when a check
// failed, else INCOMPLETE when one was skipped (or none ran), else PASS.
func (rep *Report) Add(r Result) {
	rep.Results = append(rep.Results, r)
	switch {
	case r.NotApplicable:
		rep.NotApplicable++
	case r.Skipped:
		rep.Skipped++
	case r.Pass:
		rep.Passed++
	default:
		rep.Failed++
	}
	switch {
	case rep.Failed > 0:
		rep.Verdict = VerdictFail
	case rep.Skipped > 0 || rep.Passed == 0:
		rep.Verdict = VerdictIncomplete
	default:
		rep.Verdict = VerdictPass
	}
	rep.Pass = rep.Verdict == VerdictPass
}

// Counts says how many checks passed, failed and were skipped:
// "1 passed, 0 failed, 4 skipped, 1 not applicable" (the last part only
// when there are such checks).
func (rep *Report) Counts() string {
	s := fmt.Sprintf("%d passed, %d failed, %d skipped", rep.Passed, rep.Failed, rep.Skipped)
	if rep.NotApplicable > 0 {
		s += fmt.Sprintf(", %d not applicable", rep.NotApplicable)
	}
	return s
}

// WriteText writes the table, then the details of every check that
// failed, then the verdict:
//
//	CHECK            RESULT  SUMMARY
//	i2c-scan         PASS    1 device answers: 0x27 (PCF8574 LCD backpack)
//	serial-loopback  FAIL    nothing received: is TX wired to RX?
//	keypad-test      SKIP    needs a person: run with --interactive
//	gpio-loopback    N/A     the board has no ...
//
//	selftest: FAIL (1 passed, 1 failed, 1 skipped, 1 not applicable)
//
// The verdict says PASS only when every check that applies ran and
// passed: "selftest: PASS (6 checks)".
func (rep *Report) WriteText(w io.Writer, verbose bool) error {
	var b bytes.Buffer
	width := len("CHECK")
	for _, r := range rep.Results {
		width = max(width, len(r.Name))
	}
	fmt.Fprintf(&b, "%-*s  %-6s  %s\n", width, "CHECK", "RESULT", "SUMMARY")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "%-*s  %-6s  %s\n", width, r.Name, r.Status(), r.Summary)
	}
	for _, r := range rep.Results {
		if r.Pass && !verbose || r.Skipped {
			continue
		}
		b.WriteByte('\n')
		r.WriteText(&b)
	}
	switch {
	case rep.Pass && rep.NotApplicable == 0:
		fmt.Fprintf(&b, "\nselftest: PASS (%d checks)\n", rep.Passed)
	case rep.Pass:
		fmt.Fprintf(&b, "\nselftest: PASS (%d checks; %d not applicable)\n", rep.Passed, rep.NotApplicable)
	case rep.Verdict == VerdictIncomplete:
		fmt.Fprintf(&b, "\nselftest: INCOMPLETE (%s): nothing failed, but the skipped checks did not run; give them what they ask for\n", rep.Counts())
	default:
		fmt.Fprintf(&b, "\nselftest: %s (%s)\n", rep.Verdict, rep.Counts())
	}
	_, err := w.Write(b.Bytes())
	return err
}
