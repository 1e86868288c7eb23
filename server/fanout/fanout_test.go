package fanout

import (
	"sync"
	"testing"
)

func TestPublishInOrder(t *testing.T) {
	var h Hub[int]
	a, b := h.Subscribe(10), h.Subscribe(10)
	for i := range 5 {
		if d := h.Publish(i); d != 0 {
			t.Fatalf("dropped %d", d)
		}
	}
	for _, s := range []*Sub[int]{a, b} {
		for i := range 5 {
			if v := <-s.C(); v != i {
				t.Fatalf("got %d, want %d", v, i)
			}
		}
	}
	a.Close()
	a.Close()
	if h.Len() != 1 {
		t.Fatalf("Len = %d after Close", h.Len())
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("Done not closed by Close")
	}
	if a.Lagged() {
		t.Fatal("a closed subscriber is not lagging")
	}
}

// A subscriber that stops reading is dropped once its buffer is full; the
// publisher never waits and the others keep getting every value.
func TestSlowSubscriberDropped(t *testing.T) {
	var h Hub[int]
	slow, fast := h.Subscribe(3), h.Subscribe(100)
	var wg sync.WaitGroup
	got := make([]int, 0, 50)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := range fast.C() {
			got = append(got, v)
			if v == 49 {
				return
			}
		}
	}()
	dropped := 0
	for i := range 50 {
		dropped += h.Publish(i)
	}
	wg.Wait()
	if dropped != 1 || !slow.Lagged() || fast.Lagged() {
		t.Fatalf("dropped %d, slow lagged %v, fast lagged %v", dropped, slow.Lagged(), fast.Lagged())
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber's Done not closed")
	}
	if len(slow.C()) != 3 {
		t.Fatalf("slow kept %d values, want its buffer of 3", len(slow.C()))
	}
	if len(got) != 50 {
		t.Fatalf("fast got %d values", len(got))
	}
	if h.Len() != 1 {
		t.Fatalf("Len = %d", h.Len())
	}
}
