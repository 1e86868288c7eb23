package checks

import (
	"context"
	"fmt"
)

// Step is one check of a selftest.
type Step struct {
	// Name is the check's name, for the table when the step is skipped.
	Name string
	// Skip, when set, is why the step does not run although it could: it
	// lacks a stand-in only the user can provide (a jumper, a wired pair
	// of pins, a person, a server), and says how to provide it ("needs a
	// person: run with --interactive"). A skipped step keeps the selftest
	// from passing (INCOMPLETE).
	Skip string
	// NotApplicable, when set, is why the check does not apply to the
	// board at all ("the board has no keypad"); it does not count against
	// the selftest.
	NotApplicable string
	// Run runs the check.
	Run func(ctx context.Context) Result
}

// Skipped returns the Result of a check that did not run for lack of what
// why asks for.
func Skipped(name, why string) Result {
	return Result{Name: name, Pass: true, Skipped: true, Summary: why}
}

// NotApplicable returns the Result of a check that does not apply to the
// board.
func NotApplicable(name, why string) Result {
	return Result{Name: name, Pass: true, Skipped: true, NotApplicable: true, Summary: why}
}

// Failed returns a failed Result for a check that could not start (its
// device did not open, say).
func Failed(name string, err error) Result {
	return Result{Name: name, Summary: err.Error()}
}

// Selftest runs the steps in order and gathers their results; done, when
// set, is called after each one (to print progress). When ctx ends, the
// steps not yet run fail as interrupted.
func Selftest(ctx context.Context, steps []Step, done func(Result)) Report {
	var rep Report
	for _, s := range steps {
		var r Result
		switch {
		case ctx.Err() != nil:
			r = Result{Name: s.Name, Summary: fmt.Sprintf("not run: interrupted (%v)", context.Cause(ctx))}
		case s.NotApplicable != "":
			r = NotApplicable(s.Name, s.NotApplicable)
		case s.Skip != "":
			r = Skipped(s.Name, s.Skip)
		case s.Run == nil:
			r = Skipped(s.Name, "nothing to run")
		default:
			r = s.Run(ctx)
			if r.Name == "" {
				r.Name = s.Name
			}
		}
		rep.Add(r)
		if done != nil {
			done(r)
		}
	}
	return rep
}
