package console

import (
	"context"
	"io"
	"time"
)

// EscDelay is how long a lone ESC waits for the rest of an escape sequence
// before it counts as the Escape key. A terminal sends a sequence in one
// burst, far quicker; terminals and curses wait about as long.
const EscDelay = 50 * time.Millisecond

// ReadKeys reads r and calls fn with the keys of each read (never empty;
// fn may keep the slice) until the input ends, reading fails, fn returns an
// error or ctx ends. When the input goes quiet for EscDelay after a lone
// ESC, the ESC is delivered as KeyEscape without waiting for the next key;
// at the end of the input the decoder is flushed (Decoder.Flush).
//
// ReadKeys returns the read error (io.EOF when the input ended), fn's error
// or ctx.Err(). Its blocking read runs in a goroutine that ReadKeys stops
// before returning when r has SetReadDeadline (an *os.File TTY, a Serial):
// the deadline interrupts the read and is cleared again, so r can be read
// afterwards. With a plain io.Reader that goroutine ends at its next read.
func ReadKeys(ctx context.Context, r io.Reader, fn func([]Key) error) error {
	chunks := make(chan []byte)
	rerr := make(chan error, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go readChunks(r, chunks, rerr, stop, done)
	defer stopReading(r, stop, done)

	// quiet runs while a lone ESC is held; the loop below owns it and the
	// decoder, so a byte arriving as it fires is simply decoded after the
	// flush.
	quiet := time.NewTimer(EscDelay)
	quiet.Stop()
	defer quiet.Stop()
	var dec Decoder
	deliver := func(keys []Key) error {
		if len(keys) == 0 {
			return nil
		}
		return fn(keys)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case data := <-chunks:
			keys := dec.Decode(nil, data)
			if dec.loneEsc() {
				quiet.Reset(EscDelay)
			} else {
				quiet.Stop()
			}
			if err := deliver(keys); err != nil {
				return err
			}
		case <-quiet.C:
			if err := deliver(dec.Flush(nil)); err != nil {
				return err
			}
		case err := <-rerr:
			if ferr := deliver(dec.Flush(nil)); ferr != nil {
				return ferr
			}
			return err
		}
	}
}

// readChunks is ReadKeys' blocking read: it sends what it reads on chunks
// and its final error on rerr, and ends then or when stop closes.
func readChunks(r io.Reader, chunks chan<- []byte, rerr chan<- error, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			select {
			case chunks <- data:
			case <-stop:
				return
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		if err != nil {
			rerr <- err // buffered: the only send
			return
		}
		if n == 0 {
			// A reader with a read timeout (a raw serial.Port) returns
			// (0, nil); don't spin on it.
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

type readDeadliner interface {
	SetReadDeadline(t time.Time) error
}

// stopReading ends readChunks: at once when r takes a read deadline,
// otherwise at its next read.
func stopReading(r io.Reader, stop chan struct{}, done <-chan struct{}) {
	close(stop)
	d, ok := r.(readDeadliner)
	if !ok || d.SetReadDeadline(time.Now()) != nil {
		return
	}
	select {
	case <-done:
		_ = d.SetReadDeadline(time.Time{})
	case <-time.After(time.Second):
	}
}
