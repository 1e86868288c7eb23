package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "termlink", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.time", Value: "2026-11-26T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
			{Key: "GOARM", Value: "6"},
		}}
	tagged := &debug.BuildInfo{Main: debug.Module{Path: "termlink", Version: "v1.4.0"}}
	tests := []struct {
		name, stamped string
		bi            *debug.BuildInfo
		ok            bool
		version       string
		lines         []string
	}{
		{"stamped wins", "v1.2.3-4-gabc", vcs, true, "v1.2.3-4-gabc",
			[]string{"termd v1.2.3-4-gabc\n", "  module  (devel)\n", "  commit  0123456789abcdef0123 (modified) of 2026-11-26T12:00:00Z\n", "  go      go1.26.8 ", " GOARM=6\n"}},
		{"commit when not stamped", "", vcs, true, "devel-0123456789ab-dirty", nil},
		{"module version", "", tagged, true, "v1.4.0", []string{"  module  v1.4.0\n"}},
		{"no build info", "", nil, false, "devel", nil},
		{"no build info, stamped", "v2", nil, false, "v2", nil},
	}
	for _, tt := range tests {
		in := fromBuildInfo(tt.stamped, tt.bi, tt.ok)
		if in.Version != tt.version {
			t.Errorf("%s: version %q, want %q", tt.name, in.Version, tt.version)
		}
		s := in.String("termd")
		if !strings.HasPrefix(s, "termd "+tt.version+"\n") {
			t.Errorf("%s: %q does not start with the name and version", tt.name, s)
		}
		for _, l := range tt.lines {
			if !strings.Contains(s, l) {
				t.Errorf("%s: %q lacks %q", tt.name, s, l)
			}
		}
	}
}
