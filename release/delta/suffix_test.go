package delta

import (
	"bytes"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
)

// The suffix array is every suffix in lexical order, the empty one
// first, for texts with no repeats, long runs, periodic ones and none.
func TestSuffixArray(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 5000)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	texts := map[string][]byte{
		"empty":    {},
		"one":      {'x'},
		"run":      bytes.Repeat([]byte{0}, 3000),
		"periodic": bytes.Repeat([]byte("abcab"), 700),
		"random":   random,
		"small alphabet": func() []byte {
			b := make([]byte, 4000)
			for i := range b {
				b[i] = "ab"[r.IntN(2)]
			}
			return b
		}(),
	}
	if exe, err := os.ReadFile(os.Args[0]); err == nil {
		texts["this test binary, first 200 KiB"] = exe[:min(len(exe), 200<<10)]
	}
	for name, text := range texts {
		t.Run(name, func(t *testing.T) {
			I := suffixArray(text)
			if len(I) != len(text)+1 || int(I[0]) != len(text) {
				t.Fatalf("%d entries starting %d, want %d starting with the empty suffix", len(I), I[0], len(text)+1)
			}
			want := make([]int32, len(text)+1)
			for i := range want {
				want[i] = int32(i)
			}
			sort.Slice(want, func(a, b int) bool { return bytes.Compare(text[want[a]:], text[want[b]:]) < 0 })
			for i := range want {
				if I[i] != want[i] {
					t.Fatalf("entry %d is suffix %d, want %d", i, I[i], want[i])
				}
			}
		})
	}
}

// A stream that is not index/suffixarray's serialization is refused,
// not decoded into a wrong array.
func TestSuffixArrayReaderRefuses(t *testing.T) {
	for name, stream := range map[string][]byte{
		"negative length": {0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"chunk too short": append(make([]byte, 10), 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0), // length 0, then a chunk of size 1
		"entry past text": append(append(make([]byte, 10), 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0), 5, 6),
	} {
		r := &saReader{I: make([]int32, 1, 2)}
		if _, err := r.Write(stream); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
}

func BenchmarkSuffixArray(b *testing.B) {
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(exe)))
	for b.Loop() {
		suffixArray(exe)
	}
}
