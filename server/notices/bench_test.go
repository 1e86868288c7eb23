package notices

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkNoticesOpen opens mailboxes of -per notices for each of 5,000
// peers (created as broadcasts), from the snapshot a clean close wrote.
func BenchmarkNoticesOpen(b *testing.B) {
	dir := b.TempDir()
	ns, err := Open(dir, Options{NoSync: true, Sweep: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	peers := make([]string, 5000)
	for i := range peers {
		peers[i] = fmt.Sprintf("kiosk-%05d", i)
	}
	for i := range 100 {
		if _, err := ns.Create("ch", peers, spec(fmt.Sprint("notice ", i))); err != nil {
			b.Fatal(err)
		}
	}
	if err := ns.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		ns, err := Open(dir, Options{NoSync: true, Sweep: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		ns.st.(*LocalStorage).waitBuilt() // timed: the store's index too, not only the state
		b.StopTimer()
		if n := ns.Count("ch", peers[0]); n != 100 {
			b.Fatalf("count %d", n)
		}
		_ = ns.st.(*LocalStorage).wl.Close()
		b.StartTimer()
	}
}
