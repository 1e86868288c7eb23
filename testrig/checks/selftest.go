package checks

import (
	"context"
	"fmt"
)

// Step is one check of a selftest.
type Step struct {
	// Name is the check's name, for the table when the step is skipped.
	Name string
	// Skip, when set, is why the step does not run ("needs a person: run
	// with --interactive"); the step then passes as skipped.
	Skip string
	// Run runs the check.
	Run func(ctx context.Context) Result
}

// Skipped returns a skipped Result for a check that does not apply.
func Skipped(name, why string) Result {
	return Result{Name: name, Pass: true, Skipped: true, Summary: why}
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
	rep.Pass = true
	for _, s := range steps {
		var r Result
		switch {
		case ctx.Err() != nil:
			r = Result{Name: s.Name, Summary: fmt.Sprintf("not run: interrupted (%v)", context.Cause(ctx))}
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
