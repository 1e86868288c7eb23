package delta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func roundTrip(t testing.TB, old, nb []byte) []byte {
	t.Helper()
	var p bytes.Buffer
	if err := Diff(old, nb, &p); err != nil {
		t.Fatalf("Diff: %v", err)
	}
	var out bytes.Buffer
	if err := Apply(bytes.NewReader(old), int64(len(old)), bytes.NewReader(p.Bytes()), int64(p.Len()), int64(len(nb)), &out); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !bytes.Equal(out.Bytes(), nb) {
		t.Fatalf("Apply made %d bytes, not the %d of the new file", out.Len(), len(nb))
	}
	return p.Bytes()
}

// binaryLike is data shaped a little like code: words, many repeated,
// with addresses in them.
func binaryLike(r *rand.Rand, n int) []byte {
	b := make([]byte, 0, n)
	words := make([][]byte, 64)
	for i := range words {
		words[i] = make([]byte, 4+r.IntN(12))
		for j := range words[i] {
			words[i][j] = byte(r.IntN(256))
		}
	}
	for len(b) < n {
		b = append(b, words[r.IntN(len(words))]...)
		a := uint32(len(b))
		b = append(b, byte(a), byte(a>>8), byte(a>>16), byte(a>>24))
	}
	return b[:n]
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	old := binaryLike(r, 200<<10)
	// The new one: a block inserted near the start (every address after
	// it moves), a block removed, some bytes changed.
	nb := append([]byte{}, old[:1000]...)
	nb = append(nb, binaryLike(r, 3000)...)
	nb = append(nb, old[1000:50000]...)
	nb = append(nb, old[60000:]...)
	for i := 0; i < len(nb); i += 997 {
		nb[i]++
	}
	p := roundTrip(t, old, nb)
	if len(p) > len(nb)/4 {
		t.Errorf("the patch is %d bytes for a new file of %d", len(p), len(nb))
	}
	for _, c := range []struct {
		name    string
		old, nb []byte
	}{
		{"empty both", nil, nil},
		{"empty old", nil, []byte("hello, world")},
		{"empty new", []byte("hello"), nil},
		{"same", old[:5000], old[:5000]},
		{"tiny", []byte("a"), []byte("b")},
		{"zeros", make([]byte, 70000), make([]byte, 80000)},
	} {
		t.Run(c.name, func(t *testing.T) { roundTrip(t, c.old, c.nb) })
	}
}

// TestApplyRefuses: each damage of a valid patch is an ErrCorrupt, named.
func TestApplyRefuses(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	old := binaryLike(r, 40000)
	nb := append(binaryLike(r, 500), old...)
	var p bytes.Buffer
	if err := Diff(old, nb, &p); err != nil {
		t.Fatal(err)
	}
	good := p.Bytes()
	apply := func(patch []byte, want int64) error {
		var out bytes.Buffer
		return Apply(bytes.NewReader(old), int64(len(old)), bytes.NewReader(patch), int64(len(patch)), want, &out)
	}
	if err := apply(good, int64(len(nb))); err != nil {
		t.Fatal(err)
	}
	if err := apply(good, int64(len(nb))+1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("another size in the manifest: %v", err)
	}
	if err := apply(good[:len(good)-1], int64(len(nb))); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated: %v", err)
	}
	if err := apply(append(append([]byte{}, good...), 0), int64(len(nb))); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a byte appended: %v", err)
	}
	for i := 0; i < len(good); i += 1 + len(good)/200 {
		bad := append([]byte{}, good...)
		bad[i] ^= 0x55
		var out bytes.Buffer
		err := Apply(bytes.NewReader(old), int64(len(old)), bytes.NewReader(bad), int64(len(bad)), int64(len(nb)), &out)
		if err == nil && !bytes.Equal(out.Bytes(), nb) {
			continue // a flipped bit in a diff or extra byte makes other bytes: the sha256 check's to catch
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: %v, not ErrCorrupt", i, err)
		}
	}
}

func FuzzApply(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	old := binaryLike(r, 4000)
	nb := append(binaryLike(r, 100), old[:3000]...)
	var p bytes.Buffer
	if err := Diff(old, nb, &p); err != nil {
		f.Fatal(err)
	}
	f.Add(p.Bytes(), int64(len(nb)))
	f.Add([]byte(Magic), int64(0))
	f.Fuzz(func(t *testing.T, patch []byte, want int64) {
		if want > 1<<20 || want < 0 {
			want = int64(len(nb))
		}
		var out bytes.Buffer
		err := Apply(bytes.NewReader(old), int64(len(old)), bytes.NewReader(patch), int64(len(patch)), want, &out)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("not ErrCorrupt: %v", err)
		}
		if int64(out.Len()) > want {
			t.Fatalf("wrote %d bytes, more than the %d wanted", out.Len(), want)
		}
	})
}
