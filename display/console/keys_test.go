package console

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"
)

// keyRecorder collects what ReadKeys delivers.
type keyRecorder struct {
	keys chan Key
}

func (kr *keyRecorder) fn(keys []Key) error {
	for _, k := range keys {
		kr.keys <- k
	}
	return nil
}

func (kr *keyRecorder) next(t *testing.T) Key {
	t.Helper()
	select {
	case k := <-kr.keys:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no key delivered")
	}
	return Key{}
}

// A lone ESC is the Escape key once the input goes quiet, without a next
// key; an escape sequence arriving in one burst is still one key.
func TestReadKeysLoneEscape(t *testing.T) {
	pr, w := io.Pipe()
	kr := &keyRecorder{keys: make(chan Key, 16)}
	done := make(chan error, 1)
	go func() { done <- ReadKeys(context.Background(), pr, kr.fn) }()

	w.Write([]byte("a\x1b[A"))
	for _, want := range []Key{r('a'), k(KeyUp)} {
		if got := kr.next(t); got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	w.Write([]byte("\x1b")) // nothing follows
	if got := kr.next(t); got != k(KeyEscape) {
		t.Fatalf("lone ESC delivered as %v, want Escape", got)
	}
	w.Write([]byte("x\x1b"))
	if got := kr.next(t); got != r('x') {
		t.Fatalf("got %v", got)
	}
	w.Close() // the end of input flushes a held ESC at once
	if got := kr.next(t); got != k(KeyEscape) {
		t.Fatalf("ESC at EOF delivered as %v", got)
	}
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("ReadKeys = %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadKeys did not return at EOF")
	}
	if len(kr.keys) != 0 {
		t.Fatalf("extra keys: %v", <-kr.keys)
	}
}

// Ending ctx interrupts a blocked read on a file (read deadline) and
// leaves the file readable; fn's error ends ReadKeys too.
func TestReadKeysStops(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ReadKeys(ctx, r, func([]Key) error { return nil }) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ReadKeys = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadKeys did not return when ctx ended")
	}

	stop := errors.New("enough")
	var got []Key
	go func() {
		done <- ReadKeys(context.Background(), r, func(keys []Key) error {
			got = append(got, keys...)
			return stop
		})
	}()
	w.Write([]byte("hi"))
	select {
	case err := <-done:
		if !errors.Is(err, stop) || !slices.Equal(got, runes("hi")) {
			t.Fatalf("ReadKeys = %v with %v, want %v with \"hi\"", err, got, stop)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the file was not readable again, or fn's error did not end ReadKeys")
	}
}

// The console's keyboard gets a lone ESC as Escape too: what is typed
// after a pause is text, not the tail of an escape sequence.
func TestConsoleLoneEscapeFlushed(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 10}, 40, 10, false, true)
	h.typ("\x1b")
	time.Sleep(20 * EscDelay) // the user pauses after Esc
	h.typ("[Dx")
	h.waitLine("[Dx") // held, the ESC would have made "[D" a Left arrow: "x"
}
