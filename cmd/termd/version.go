package main

import (
	"runtime/debug"
	"strings"
)

// version is termd's version; release builds set it with
// -ldflags "-X main.version=v1.2.3". Otherwise it comes from the build
// info (module version, or the VCS revision).
var version = ""

// termdVersion returns the version termd reports (connect's version).
func termdVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	v := "devel-" + rev[:min(len(rev), 12)]
	if dirty {
		v += "-dirty"
	}
	return strings.TrimSpace(v)
}
