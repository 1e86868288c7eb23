package display

import (
	"reflect"
	"testing"
)

func TestFrame(t *testing.T) {
	f := NewFrame(2, 4)
	if r, c := f.Size(); r != 2 || c != 4 {
		t.Fatalf("Size = %d, %d", r, c)
	}
	if f.String() != "    \n    " {
		t.Fatalf("new frame %q", f.String())
	}
	f.SetLine(0, "abcdef")
	f.SetLine(1, "xy")
	if got := f.Lines(); !reflect.DeepEqual(got, []string{"abcd", "xy  "}) {
		t.Errorf("Lines = %q", got)
	}
	if n := f.WriteAt(1, 3, "123"); n != 1 || f.Line(1) != "xy 1" {
		t.Errorf("WriteAt = %d, %q", n, f.Line(1))
	}
	if n := f.WriteAt(1, -1, "QR"); n != 1 || f.Line(1) != "Ry 1" {
		t.Errorf("WriteAt(-1) = %d, %q", n, f.Line(1))
	}
	f.Set(5, 5, 'z') // ignored
	if f.At(5, 5) != 0 || f.At(0, 1) != 'b' {
		t.Error("At")
	}
	g := f.Clone()
	if !g.Equal(f) {
		t.Error("clone differs")
	}
	g.Set(0, 0, 'Z')
	if g.Equal(f) || f.At(0, 0) != 'a' {
		t.Error("clone aliases")
	}
	f.ScrollUp(1)
	if f.Line(0) != "Ry 1" || f.Line(1) != "    " {
		t.Errorf("ScrollUp = %q", f.Lines())
	}
	big := NewFrame(3, 6)
	big.Fill('#')
	f.CopyFrom(big)
	if f.String() != "####\n####" {
		t.Errorf("CopyFrom bigger = %q", f.String())
	}
	small := NewFrame(1, 2)
	f.CopyFrom(small)
	if f.String() != "    \n    " {
		t.Errorf("CopyFrom smaller = %q", f.String())
	}
	f.SetLines([]string{"only"})
	if f.String() != "only\n    " {
		t.Errorf("SetLines = %q", f.String())
	}
	if NewFrame(-1, 5).Rows() != 0 || NewFrame(3, 0).Cols() != 0 {
		t.Error("degenerate sizes")
	}
	var zero Frame
	if zero.Line(0) != "" || zero.Row(0) != nil {
		t.Error("zero frame")
	}
}

func TestDiff(t *testing.T) {
	mk := func(lines ...string) *Frame {
		f := NewFrame(len(lines), 8)
		f.SetLines(lines)
		return f
	}
	base := mk("abcdefgh", "12345678")
	tests := []struct {
		name   string
		prev   *Frame
		next   *Frame
		maxGap int
		want   []Run
	}{
		{"same", base, mk("abcdefgh", "12345678"), 1, nil},
		{"unknown", nil, base, 1, []Run{{0, 0, 8}, {1, 0, 8}}},
		{"other size", NewFrame(1, 8), base, 1, []Run{{0, 0, 8}, {1, 0, 8}}},
		{"one cell", base, mk("abcdefgh", "123x5678"), 1, []Run{{1, 3, 1}}},
		{"first and last", base, mk("Xbcdefgh", "1234567Y"), 1, []Run{{0, 0, 1}, {1, 7, 1}}},
		{"gap joined", base, mk("XbXdefgh", "12345678"), 1, []Run{{0, 0, 3}}},
		{"gap too wide", base, mk("XbcXefgh", "12345678"), 1, []Run{{0, 0, 1}, {0, 3, 1}}},
		{"gap zero", base, mk("XbXdefgh", "12345678"), 0, []Run{{0, 0, 1}, {0, 2, 1}}},
		{"whole row", base, mk("ABCDEFGH", "12345678"), 0, []Run{{0, 0, 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Diff(tt.prev, tt.next, tt.maxGap); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff = %v, want %v", got, tt.want)
			}
		})
	}
	if Diff(base, nil, 0) != nil {
		t.Error("Diff(nil next)")
	}
	if got := DiffCells([]byte{1, 2, 3, 4}, []byte{1, 9, 3, 9}, 2, 0); !reflect.DeepEqual(got, []Run{{0, 1, 1}, {1, 1, 1}}) {
		t.Errorf("DiffCells bytes = %v", got)
	}
}

func TestFrameEdges(t *testing.T) {
	f := NewFrame(3, 2)
	f.SetLines([]string{"ab", "cd", "ef"})
	f.ScrollUp(0)
	f.ScrollUp(5)
	if f.String() != "  \n  \n  " {
		t.Errorf("ScrollUp(5) = %q", f.String())
	}
	f.CopyFrom(nil)
	var nilFrame *Frame
	if !nilFrame.Equal(nil) || f.Equal(nil) || f.Equal(NewFrame(2, 3)) {
		t.Error("Equal")
	}
	if Width("ｶﾞé") != 3 {
		t.Error("Width")
	}
}
