package checks

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestResultText(t *testing.T) {
	r := newResult("i2c-scan")
	r.Summary = "1 device answers"
	r.Detailf("grid line 1\ngrid line 2")
	r.Set("devices", 1)
	r.Set("latency_p50_us", 12.3456)
	r.Set("devices", 2)
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "PASS i2c-scan: 1 device answers\n  grid line 1\n  grid line 2\n  devices         2\n  latency_p50_us  12.35\n"
	if b.String() != want {
		t.Errorf("text:\n%q\nwant\n%q", b.String(), want)
	}
	r.Fail("first reason")
	r.Fail("second reason")
	if r.Pass || r.Summary != "first reason" || r.Details[len(r.Details)-1] != "second reason" || r.Status() != "FAIL" {
		t.Errorf("after two failures: %+v", r)
	}
}

func TestResultJSON(t *testing.T) {
	r := Result{Name: "lcd-test", Pass: true, Summary: "ok", Metrics: []Metric{{"fps", 61.5}, {"i2c_errors", 0}, {"bad", math.NaN()}}}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"lcd-test","pass":true,"skipped":false,"summary":"ok","details":[],"metrics":{"fps":61.5,"i2c_errors":0,"bad":null}}`
	if string(data) != want {
		t.Errorf("JSON\n%s\nwant\n%s", data, want)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != r.Name || len(back.Metrics) != 3 || back.Metrics[0] != r.Metrics[0] || !math.IsNaN(back.Metrics[2].Value) {
		t.Errorf("round trip: %+v", back)
	}
	rep := Report{}
	rep.Add(r)
	rep.Add(Skipped("keypad-test", "needs a person"))
	data, err = json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var backRep Report
	if err := json.Unmarshal(data, &backRep); err != nil {
		t.Fatal(err)
	}
	if backRep.Pass || backRep.Verdict != VerdictIncomplete || len(backRep.Results) != 2 || !backRep.Results[1].Skipped {
		t.Errorf("report round trip: %s -> %+v", data, backRep)
	}
}

func TestSelftest(t *testing.T) {
	ran := []string{}
	step := func(name string, pass bool) Step {
		return Step{Name: name, Run: func(context.Context) Result {
			ran = append(ran, name)
			r := newResult(name)
			r.Summary = "fine"
			if !pass {
				r.Fail("broken: is it plugged in?")
			}
			return *r
		}}
	}
	var progress []string
	rep := Selftest(context.Background(), []Step{
		step("i2c-scan", true),
		{Name: "keypad-test", Skip: "needs a person: run with --interactive"},
		step("serial-loopback", false),
		{Name: "lcd-test", Run: func(context.Context) Result { return Failed("lcd-test", errors.New("/dev/i2c-1 not found")) }},
	}, func(r Result) { progress = append(progress, r.Name+" "+r.Status()) })
	if rep.Pass {
		t.Error("report passes with a failed check")
	}
	if !reflect.DeepEqual(ran, []string{"i2c-scan", "serial-loopback"}) {
		t.Errorf("ran %v", ran)
	}
	if !reflect.DeepEqual(progress, []string{"i2c-scan PASS", "keypad-test SKIP", "serial-loopback FAIL", "lcd-test FAIL"}) {
		t.Errorf("progress %v", progress)
	}
	var b strings.Builder
	rep.WriteText(&b, false)
	out := b.String()
	for _, want := range []string{
		"CHECK            RESULT  SUMMARY\n",
		"i2c-scan         PASS    fine\n",
		"keypad-test      SKIP    needs a person: run with --interactive\n",
		"serial-loopback  FAIL    broken: is it plugged in?\n",
		"\nFAIL serial-loopback: broken: is it plugged in?\n",
		"selftest: FAIL (1 passed, 2 failed, 1 skipped)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep = Selftest(ctx, []Step{step("i2c-scan", true)}, nil)
	if rep.Pass || !strings.Contains(rep.Results[0].Summary, "interrupted") {
		t.Errorf("interrupted: %+v", rep)
	}
}

// The verdict says PASS only when every check that applies ran and
// passed; a check skipped for lack of a stand-in makes it INCOMPLETE.
func TestReportVerdict(t *testing.T) {
	pass := func(name string) Result { return Result{Name: name, Pass: true, Summary: "fine"} }
	fail := func(name string) Result { return Result{Name: name, Summary: "broken"} }
	six := []string{"i2c-scan", "lcd-test", "serial-loopback", "gpio-loopback", "keypad-test", "link-test"}
	all := func(f func(string) Result) []Result {
		var out []Result
		for _, n := range six {
			out = append(out, f(n))
		}
		return out
	}
	tests := []struct {
		name    string
		results []Result
		verdict string
		line    string
	}{
		{"all pass", all(pass), VerdictPass, "selftest: PASS (6 checks)"},
		{"five skipped", append([]Result{pass("lcd-test")}, Skipped("i2c-scan", "x"), Skipped("serial-loopback", "x"),
			Skipped("gpio-loopback", "x"), Skipped("keypad-test", "x"), Skipped("link-test", "x")),
			VerdictIncomplete, "selftest: INCOMPLETE (1 passed, 0 failed, 5 skipped)"},
		{"not applicable", append(all(pass)[1:], NotApplicable("i2c-scan", "the LCD is on GPIO lines")),
			VerdictPass, "selftest: PASS (5 checks; 1 not applicable)"},
		{"fail beats skip", []Result{fail("lcd-test"), Skipped("keypad-test", "x"), NotApplicable("i2c-scan", "x")},
			VerdictFail, "selftest: FAIL (0 passed, 1 failed, 1 skipped, 1 not applicable)"},
		{"nothing ran", []Result{NotApplicable("i2c-scan", "x")}, VerdictIncomplete, "selftest: INCOMPLETE (0 passed, 0 failed, 0 skipped, 1 not applicable)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rep Report
			for _, r := range tt.results {
				rep.Add(r)
			}
			var b strings.Builder
			rep.WriteText(&b, false)
			if rep.Verdict != tt.verdict || rep.Pass != (tt.verdict == VerdictPass) || !strings.Contains(b.String(), "\n"+tt.line) {
				t.Errorf("verdict %s pass %v, want %s; text:\n%s\nwant the line %q", rep.Verdict, rep.Pass, tt.verdict, b.String(), tt.line)
			}
			data, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back.Counts(), rep.Counts()) ||
				back.Verdict != rep.Verdict || back.Results[len(back.Results)-1].NotApplicable != rep.Results[len(rep.Results)-1].NotApplicable {
				t.Errorf("JSON round trip: %v\n%s", err, data)
			}
		})
	}
}

func TestExplainOpen(t *testing.T) {
	tests := []struct {
		kind DeviceKind
		dev  string
		err  error
		want string
	}{
		{I2CDevice, "/dev/i2c-1", errors.New("sysfs-i2c: bus #1 is not configured: open /dev/i2c-1: no such file or directory"),
			"/dev/i2c-1 not found: enable I2C (raspi-config nonint do_i2c 0)"},
		{I2CDevice, "/dev/i2c-1", errors.New("open /dev/i2c-1: permission denied"),
			"/dev/i2c-1 permission denied: join the i2c group (sudo usermod -aG i2c $USER, then log out and in again)"},
		{GPIODevice, "/dev/gpiochip0", errors.New("permission denied"), "join the gpio group"},
		{SerialDevice, "/dev/ttyAMA0", errors.New("device or resource busy"), "/dev/ttyAMA0 busy: another process has it open"},
		{I2CDevice, "/dev/i2c-1", errors.New("something odd"), "/dev/i2c-1 something odd"},
	}
	for _, tt := range tests {
		err := ExplainOpen(tt.kind, tt.dev, tt.err)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ExplainOpen(%v) = %v, want %q", tt.err, err, tt.want)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("ExplainOpen(%v) does not wrap it", tt.err)
		}
	}
	if ExplainOpen(I2CDevice, "x", nil) != nil {
		t.Error("nil error explained")
	}
}
