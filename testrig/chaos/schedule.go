package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Action is one thing a Proxy can be told to do.
type Action struct {
	// Name is normal, stall, refuse, down, cut or latency.
	Name string
	// Latency is the delay of a latency action.
	Latency time.Duration
}

// ActionNames lists the action names ParseAction knows.
var ActionNames = []string{"normal", "stall", "refuse", "down", "cut", "latency=D"}

func (a Action) String() string {
	if a.Name == "latency" {
		return "latency=" + a.Latency.String()
	}
	return a.Name
}

// ParseAction parses "normal", "stall", "refuse", "down", "cut" or
// "latency=D" (D a Go duration such as 200ms).
func ParseAction(s string) (Action, error) {
	s = strings.TrimSpace(s)
	name, arg, hasArg := strings.Cut(s, "=")
	switch name {
	case "normal", "stall", "refuse", "down", "cut":
		if hasArg {
			return Action{}, fmt.Errorf("action %q takes no value", name)
		}
		return Action{Name: name}, nil
	case "latency":
		if !hasArg {
			return Action{}, errors.New(`action "latency" needs a duration: latency=200ms`)
		}
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return Action{}, fmt.Errorf("latency %q must be a duration such as 200ms", arg)
		}
		return Action{Name: "latency", Latency: d}, nil
	case "":
		return Action{}, errors.New("empty action")
	}
	return Action{}, fmt.Errorf("unknown action %q (known: %s)", name, strings.Join(ActionNames, ", "))
}

// Apply does a: normal clears the stall, the refusal and the latency;
// latency=D sets the latency and clears a stall or refusal; stall and
// refuse switch the mode; cut resets every open connection; down cuts and
// then refuses.
func (p *Proxy) Apply(a Action) error {
	switch a.Name {
	case "normal":
		p.SetLatency(0)
		p.SetMode(Normal)
	case "latency":
		p.SetLatency(a.Latency)
		p.SetMode(Normal)
	case "stall":
		p.SetMode(Stall)
	case "refuse":
		p.SetMode(Refuse)
	case "down":
		p.SetMode(Refuse)
		p.Cut()
	case "cut":
		p.Cut()
	default:
		return fmt.Errorf("unknown action %q", a.Name)
	}
	return nil
}

// Step is an action at an offset from the start of a schedule.
type Step struct {
	At     time.Duration
	Action Action
}

// Schedule is a list of steps, optionally repeated.
type Schedule struct {
	Steps []Step
	// Repeat, when positive, starts the steps again every Repeat.
	Repeat time.Duration
}

// ParseSchedule parses "5s:cut,10s:stall,15s:normal": comma-separated
// OFFSET:ACTION steps, offsets from the start and not decreasing. repeat
// (0: run once) must be at least the last offset.
func ParseSchedule(s string, repeat time.Duration) (Schedule, error) {
	var sched Schedule
	s = strings.TrimSpace(s)
	if s == "" {
		return sched, errors.New("empty schedule")
	}
	var last time.Duration
	for i, part := range strings.Split(s, ",") {
		at, act, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return sched, fmt.Errorf("step %d %q: want OFFSET:ACTION such as 5s:cut", i+1, part)
		}
		d, err := time.ParseDuration(strings.TrimSpace(at))
		if err != nil || d < 0 {
			return sched, fmt.Errorf("step %d %q: offset %q must be a duration such as 5s", i+1, part, at)
		}
		if d < last {
			return sched, fmt.Errorf("step %d %q: offset %s is before the previous step's %s", i+1, part, d, last)
		}
		a, err := ParseAction(act)
		if err != nil {
			return sched, fmt.Errorf("step %d %q: %w", i+1, part, err)
		}
		sched.Steps = append(sched.Steps, Step{At: d, Action: a})
		last = d
	}
	switch {
	case repeat < 0:
		return sched, fmt.Errorf("repeat %s must not be negative", repeat)
	case repeat > 0 && repeat < last:
		return sched, fmt.Errorf("repeat %s is shorter than the last offset %s", repeat, last)
	}
	sched.Repeat = repeat
	return sched, nil
}

// RunSchedule applies the schedule's steps at their offsets from now
// (again every Repeat, when set) until ctx ends or the steps are done.
// step, when not nil, is called after each step.
func (p *Proxy) RunSchedule(ctx context.Context, sched Schedule, step func(Step)) error {
	start := time.Now()
	for {
		for _, st := range sched.Steps {
			t := time.NewTimer(time.Until(start.Add(st.At)))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			if err := p.Apply(st.Action); err != nil {
				return err
			}
			if step != nil {
				step(st)
			}
		}
		if sched.Repeat <= 0 {
			return nil
		}
		start = start.Add(sched.Repeat)
		t := time.NewTimer(time.Until(start))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
