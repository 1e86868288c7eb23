package input

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// typist presses keys on an Entry with a fake clock.
type typist struct {
	e    Entry
	now  time.Time
	acts []Action
}

func newTypist(e Entry) *typist { return &typist{e: e, now: time.Unix(5000, 0)} }

func (ty *typist) handle(kind Kind, key rune) {
	ty.acts = append(ty.acts, ty.e.Handle(Event{Kind: kind, Key: key, Time: ty.now})...)
}

// tick advances the clock, running Tick at the deadline like Drive does.
func (ty *typist) tick(d time.Duration) {
	end := ty.now.Add(d)
	for {
		dl, ok := ty.e.Deadline()
		if !ok || dl.After(end) {
			break
		}
		ty.now = dl
		ty.acts = append(ty.acts, ty.e.Tick(dl)...)
	}
	ty.now = end
}

// tap presses and releases key, 100ms apart; the next key comes 100ms later.
func (ty *typist) tap(key rune) {
	ty.handle(KeyDown, key)
	ty.tick(100 * ms)
	ty.handle(KeyUp, key)
	ty.tick(100 * ms)
}

// hold presses key, lets it auto-repeat n times, and releases it.
func (ty *typist) hold(key rune, n int) {
	ty.handle(KeyDown, key)
	ty.tick(500 * ms)
	for range n {
		ty.handle(KeyRepeat, key)
		ty.tick(66 * ms)
	}
	ty.handle(KeyUp, key)
	ty.tick(50 * ms)
}

// typeSeq taps each key of seq; a space is a pause of one second.
func (ty *typist) typeSeq(seq string) {
	for _, k := range seq {
		if k == ' ' {
			ty.tick(time.Second)
			continue
		}
		ty.tap(k)
	}
}

func (ty *typist) sent() []string {
	var out []string
	for _, a := range ty.acts {
		if a.Kind == Send {
			out = append(out, a.Text)
		}
	}
	return out
}

func (ty *typist) last(kind ActionKind) (Action, bool) {
	for i := len(ty.acts) - 1; i >= 0; i-- {
		if ty.acts[i].Kind == kind {
			return ty.acts[i], true
		}
	}
	return Action{}, false
}

func TestMultiTapSequences(t *testing.T) {
	tests := []struct {
		seq, want string
	}{
		{"44 444 0 2", "hi a"},
		{"4433555 555666", "hello"},
		{"2", "a"},
		{"22", "b"},
		{"222", "c"},
		{"2222", "2"},
		{"22222", "a"},
		{"2 2", "aa"},
		{"23", "ad"},
		{"7777", "s"},
		{"77777", "7"},
		{"9999", "z"},
		{"0", " "},
		{"00", "0"},
		{"1 11 111 1111 11111 111111 1111111", ".,?!'-1"},
		{"*44", "H"},
		{"*44 *2", "H2"},
		{"**2345", "2345"},
		{"***44", "h"},
		{"*8 *2", "T2"},
		{"44 D", ""},
		{"4433D", "h"},
		{"44 444DD", ""},
		{"D2", "a"},
		{"AB", ""},  // scrolling does not touch the text
		{"C2", "a"}, // unbound keys are ignored
	}
	for _, tt := range tests {
		ty := newTypist(NewMultiTap(MultiTapOpts{}))
		ty.typeSeq(tt.seq)
		ty.tick(time.Second)
		mt := ty.e.(*MultiTap)
		if got := mt.Text(); got != tt.want {
			t.Errorf("%q -> %q, want %q", tt.seq, got, tt.want)
		}
		if ed, ok := ty.last(Edit); ok && ed.Text != tt.want {
			t.Errorf("%q: last Edit %q, want %q", tt.seq, ed.Text, tt.want)
		}
	}
}

func TestMultiTapTimeoutCommits(t *testing.T) {
	mt := NewMultiTap(MultiTapOpts{})
	ty := newTypist(mt)
	ty.handle(KeyDown, '2')
	ty.handle(KeyUp, '2')
	if a := ty.acts[len(ty.acts)-1]; a.Kind != Edit || a.Text != "a" || !a.Pending {
		t.Fatalf("after a tap: %+v, want Edit a pending", a)
	}
	dl, ok := mt.Deadline()
	if !ok || dl != ty.now.Add(800*ms) {
		t.Fatalf("Deadline = %v %v, want 800ms ahead", dl, ok)
	}
	if acts := mt.Tick(ty.now.Add(799 * ms)); acts != nil {
		t.Fatalf("Tick before the timeout: %v", acts)
	}
	acts := mt.Tick(ty.now.Add(800 * ms))
	if len(acts) != 1 || acts[0].Text != "a" || acts[0].Pending {
		t.Fatalf("Tick at the timeout: %+v, want Edit a committed", acts)
	}
	if _, ok := mt.Deadline(); ok {
		t.Fatal("deadline after commit")
	}
	// The same key after the timeout starts a new letter.
	ty.now = ty.now.Add(900 * ms)
	ty.handle(KeyDown, '2')
	if got := mt.Text(); got != "aa" {
		t.Fatalf("Text = %q", got)
	}
	// Custom timeout.
	mt2 := NewMultiTap(MultiTapOpts{Timeout: 2 * time.Second})
	ty2 := newTypist(mt2)
	ty2.tap('2')
	ty2.tick(1500 * ms)
	ty2.tap('2')
	if got := mt2.Text(); got != "b" {
		t.Fatalf("2s timeout: %q", got)
	}
}

func TestMultiTapCaseKey(t *testing.T) {
	mt := NewMultiTap(MultiTapOpts{})
	ty := newTypist(mt)
	var modes []Mode
	for range 4 {
		ty.tap('*')
		a, _ := ty.last(ModeChange)
		modes = append(modes, a.Mode)
	}
	if want := []Mode{Upper, Digits, Lower, Upper}; !slices.Equal(modes, want) {
		t.Fatalf("modes %v, want %v", modes, want)
	}
	if Upper.String() != "ABC" || Digits.String() != "123" || Lower.String() != "abc" {
		t.Fatal("mode names")
	}
	// Changing case commits the pending letter as it was.
	mt2 := NewMultiTap(MultiTapOpts{})
	ty2 := newTypist(mt2)
	ty2.typeSeq("22*22")
	if got := mt2.Text(); got != "bB" {
		t.Fatalf("%q, want bB", got)
	}
}

func TestMultiTapSend(t *testing.T) {
	ty := newTypist(NewMultiTap(MultiTapOpts{}))
	ty.typeSeq("44 444#")
	if got := ty.sent(); !slices.Equal(got, []string{"hi"}) {
		t.Fatalf("sent %q", got)
	}
	if got := ty.e.(*MultiTap).Text(); got != "" {
		t.Fatalf("text after send %q", got)
	}
	ty.typeSeq("#0#") // blank: nothing sent, a SendBlank each
	if got := ty.sent(); len(got) != 1 {
		t.Fatalf("blank sends %q", got)
	}
	n := 0
	for _, a := range ty.acts {
		if a.Kind == SendBlank {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d SendBlank for two sends with nothing typed, want 2", n)
	}
}

func TestMultiTapHoldTypesDigit(t *testing.T) {
	ty := newTypist(NewMultiTap(MultiTapOpts{}))
	ty.hold('5', 3)
	if got := ty.e.(*MultiTap).Text(); got != "5" {
		t.Fatalf("held 5: %q", got)
	}
	// Two taps (k), then a held third press: k stays, 5 is added.
	ty2 := newTypist(NewMultiTap(MultiTapOpts{}))
	ty2.tap('5')
	ty2.tap('5')
	ty2.hold('5', 1)
	if got := ty2.e.(*MultiTap).Text(); got != "k5" {
		t.Fatalf("55+hold 5: %q", got)
	}
	// Holding delete deletes repeatedly.
	ty3 := newTypist(NewMultiTap(MultiTapOpts{}))
	ty3.typeSeq("2 3 4 5 6")
	ty3.tick(time.Second)
	ty3.hold('D', 3)
	if got := ty3.e.(*MultiTap).Text(); got != "a" {
		t.Fatalf("held delete: %q, want a", got)
	}
	// Holding scroll scrolls repeatedly.
	ty4 := newTypist(NewMultiTap(MultiTapOpts{}))
	ty4.hold('A', 2)
	n := 0
	for _, a := range ty4.acts {
		if a.Kind == ScrollUp {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d ScrollUp actions for a press and 2 repeats", n)
	}
}

func TestMultiTap3x4HoldBindings(t *testing.T) {
	mt := NewMultiTap(MultiTapOpts{Keys: Keys3x4()})
	ty := newTypist(mt)
	ty.typeSeq("2 3 4 ")
	ty.hold('*', 2) // hold * = delete, once per repeat
	if got := mt.Text(); got != "a" {
		t.Fatalf("after holding *: %q", got)
	}
	if mt.Mode() != Lower {
		t.Fatal("holding * changed the case")
	}
	ty.tap('*') // tap * = case, on release
	if mt.Mode() != Upper {
		t.Fatalf("tapping * gave mode %v", mt.Mode())
	}
	ty.typeSeq("2#")
	if got := ty.sent(); !slices.Equal(got, []string{"aA"}) {
		t.Fatalf("sent %q", got)
	}
}

func TestMultiTapLimitsAndReset(t *testing.T) {
	mt := NewMultiTap(MultiTapOpts{MaxLen: 3})
	ty := newTypist(mt)
	ty.typeSeq("2 3 4 5 6 7")
	ty.tick(time.Second)
	if got := mt.Text(); got != "adg" {
		t.Fatalf("MaxLen 3: %q", got)
	}
	mt.SetText("draft text")
	if got := mt.Text(); got != "dra" {
		t.Fatalf("SetText beyond MaxLen: %q", got)
	}
	mt.Reset()
	if mt.Text() != "" || mt.Mode() != Lower {
		t.Fatal("Reset")
	}
	// A custom layout.
	mt2 := NewMultiTap(MultiTapOpts{Letters: map[rune]string{'2': "äöü"}})
	ty2 := newTypist(mt2)
	ty2.typeSeq("222 3")
	if got := mt2.Text(); got != "ü" {
		t.Fatalf("custom layout: %q", got)
	}
}

func TestKiosk(t *testing.T) {
	k, err := NewKiosk(map[rune]string{'1': "yes", '2': "no", '3': "call me"}, Keys4x4())
	if err != nil {
		t.Fatal(err)
	}
	ty := newTypist(k)
	ty.tap('2')
	ty.hold('1', 3) // a held phrase key sends once
	ty.tap('9')     // unmapped
	ty.hold('B', 1)
	if got := ty.sent(); !slices.Equal(got, []string{"no", "yes"}) {
		t.Fatalf("sent %q", got)
	}
	if a, _ := ty.last(ScrollDown); a.Kind != ScrollDown {
		t.Fatal("no scroll")
	}
	ty.tap('#') // the send key, not a phrase: why offline
	if a, _ := ty.last(SendBlank); a.Kind != SendBlank {
		t.Fatal("the send key gives no SendBlank")
	}
	if _, ok := k.Deadline(); ok || k.Tick(ty.now) != nil {
		t.Fatal("kiosk has time-outs")
	}
	if _, err := NewKiosk(nil, Keys{}); err == nil {
		t.Error("empty kiosk accepted")
	}
	if _, err := NewKiosk(map[rune]string{'1': "  "}, Keys{}); err == nil || !strings.Contains(err.Error(), "'1'") {
		t.Errorf("blank phrase: %v", err)
	}
}

func TestParseBinding(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Binding
		err  bool
	}{
		{"", Binding{}, false},
		{"#", Binding{Key: '#'}, false},
		{"hold:*", Binding{Key: '*', Hold: true}, false},
		{"hold:", Binding{}, true},
		{"ab", Binding{}, true},
		{"\xff", Binding{}, true},
	} {
		got, err := ParseBinding(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseBinding(%q) = %v, %v", tt.in, got, err)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
	}
}

// Drive runs an Entry on the real clock: the pending letter is committed
// by the timer without another key.
func TestDrive(t *testing.T) {
	mt := NewMultiTap(MultiTapOpts{Timeout: 30 * ms})
	events := make(chan Event)
	out := make(chan Action, 16)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { done <- Drive(ctx, events, mt, out) }()
	events <- Event{Kind: KeyDown, Key: '4', Time: time.Now()}
	events <- Event{Kind: KeyUp, Key: '4', Time: time.Now()}
	a := <-out
	if a.Kind != Edit || a.Text != "g" || !a.Pending {
		t.Fatalf("first action %+v", a)
	}
	a = <-out
	if a.Kind != Edit || a.Text != "g" || a.Pending {
		t.Fatalf("after the timeout %+v, want committed", a)
	}
	close(events)
	if err := <-done; err != nil {
		t.Fatalf("Drive = %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := Drive(ctx2, make(chan Event), mt, out); err != context.Canceled {
		t.Fatalf("cancelled Drive = %v", err)
	}
}
