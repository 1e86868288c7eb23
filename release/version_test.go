package release

import "testing"

func TestCompareVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0},
		{"v1.2.3", "1.2.3", 0},
		{"1.2", "1.2.0", 0},
		{"1.2.3+build.7", "1.2.3", 0},
		{"1.2.4", "1.2.3", 1},
		{"1.10.0", "1.9.0", 1}, // numbers, not text
		{"2", "1.99.99", 1},
		{"1.2.0-rc.1", "1.2.0", -1},
		{"1.2.0-rc.2", "1.2.0-rc.1", 1},
		{"1.2.0-rc.10", "1.2.0-rc.9", 1},
		{"1.2.0-alpha", "1.2.0-alpha.1", -1},
		{"1.2.0-1", "1.2.0-alpha", -1}, // numbers below words
		{"1.2.0-beta", "1.2.0-alpha", 1},
	} {
		got, err := CompareVersions(tt.a, tt.b)
		if err != nil || got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d", tt.a, tt.b, got, err, tt.want)
		}
		if back, _ := CompareVersions(tt.b, tt.a); back != -tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d; want %d", tt.b, tt.a, back, -tt.want)
		}
	}
	for _, bad := range []string{"devel", "abc123", "1..2", "1.2.x", "", "v", "1.2.0-", "1.2.0-rc..1", "1.2.3.4.5.6.7.8.9"} {
		if _, err := CompareVersions(bad, "1.0.0"); err == nil {
			t.Errorf("CompareVersions(%q) accepted", bad)
		}
	}
}
