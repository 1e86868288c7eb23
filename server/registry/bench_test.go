package registry

import (
	"fmt"
	"testing"
	"time"
)

// fleet5000 is a registry holding 5,000 online devices with two tags each.
func fleet5000(b *testing.B, dir string) *Registry {
	r, err := Open(dir, Options{FlushInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 5000 {
		d := dev(fmt.Sprintf("kiosk-%04d", i), map[string]string{"site": fmt.Sprintf("site-%d", i%50), "floor": fmt.Sprint(i % 5)})
		r.Connected(d)
	}
	return r
}

// BenchmarkList5000 lists a 5,000-device channel filtered by one tag (100
// match), as GET /peers?tag= does.
func BenchmarkList5000(b *testing.B) {
	r := fleet5000(b, b.TempDir())
	defer r.Close()
	f := Filter{Tags: map[string]string{"site": "site-7"}}
	b.ResetTimer()
	for b.Loop() {
		if n := len(r.List("ch", f)); n != 100 {
			b.Fatal(n)
		}
	}
}

// BenchmarkFlush5000 logs 5,000 changed devices (fsync included), as the
// write-behind does after they all reconnected; it reports the bytes
// logged per flush.
func BenchmarkFlush5000(b *testing.B) {
	dir := b.TempDir()
	r := fleet5000(b, dir)
	defer r.Close()
	b.ResetTimer()
	for b.Loop() {
		r.mu.Lock()
		for id := range r.channels["ch"].peers {
			r.channels["ch"].dirty[id] = dirtyFull
		}
		r.mu.Unlock()
		if err := r.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(r.sinceSnap+r.snapBytes)/float64(b.N), "bytes/flush")
}

// BenchmarkOpen5000 loads a registry file of 5,000 devices, as a restart does.
func BenchmarkOpen5000(b *testing.B) {
	dir := b.TempDir()
	if err := fleet5000(b, dir).Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		r, err := Open(dir, Options{FlushInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = r.Close()
		b.StartTimer()
	}
}
