package releases

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"termlink/release"
)

// slowStorage is a shared storage that lists its releases only when
// told (load): a cluster bucket a loaded NATS is slow to list.
type slowStorage struct {
	load chan struct{}
}

func (slowStorage) Info() StorageInfo { return StorageInfo{Shared: true, Where: "bucket slow"} }
func (s slowStorage) Follow(ctx context.Context, f Feed) error {
	select {
	case <-s.load:
		f.Loaded()
	case <-ctx.Done():
		return ctx.Err()
	}
	<-ctx.Done()
	return nil
}
func (slowStorage) Create(context.Context, Record, io.Reader) (Record, error) {
	return Record{}, errors.New("slowStorage: not written")
}
func (slowStorage) Open(context.Context, string, int64) (Binary, error) { return nil, ErrNotFound }
func (slowStorage) Delete(context.Context, string) error                { return ErrNotFound }
func (slowStorage) Close() error                                        { return nil }

// A store past its start's bound loads in the background when asked to:
// New returns, and until the storage has listed its releases every read
// and write answers 503 (never "not stored"); then it answers as usual.
// Without LoadInBackground New fails as before.
func TestLoadInBackground(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(ctx, slowStorage{load: make(chan struct{})}, Options{}); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Fatalf("New past its bound: %v, want a not-loaded error", err)
	}
	st := slowStorage{load: make(chan struct{})}
	s, err := New(ctx, st, Options{LoadInBackground: true})
	if err != nil {
		t.Fatalf("New in the background: %v", err)
	}
	defer s.Close()
	is503 := func(what string, err error) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.Status != 503 || !strings.Contains(e.Msg, "loading") {
			t.Fatalf("%s while loading: %v, want 503 loading", what, err)
		}
	}
	is503("Ready", s.Ready())
	_, _, err = s.OpenBinary(context.Background(), "v1", "linux/arm/6")
	is503("OpenBinary", err)
	_, err = s.Put(context.Background(), &release.Manifest{Version: "v1", Platform: "linux/arm/6", Size: 1}, strings.NewReader("x"), "otto")
	is503("Put", err)
	is503("Delete", s.Delete(context.Background(), "v1", "linux/arm/6", "otto"))

	close(st.load)
	<-s.loaded
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready once loaded: %v", err)
	}
	_, _, err = s.OpenBinary(context.Background(), "v1", "linux/arm/6")
	var e *Error
	if !errors.As(err, &e) || e.Status != 404 {
		t.Fatalf("OpenBinary once loaded: %v, want 404", err)
	}
}
