// Package buildinfo says which build of a program is running: the version
// stamped at link time (-ldflags "-X main.version=v1.2.3"), else the
// module version, and the VCS commit and commit time the go command
// records in the binary (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what a binary knows of its own build.
type Info struct {
	Version  string // stamped version, else the module version, else "devel"
	Module   string // the main module's version as the go command recorded it ("(devel)" for a local build)
	Commit   string // vcs.revision, "" when unknown
	Time     string // vcs.time: the commit's time (RFC 3339), "" when unknown; Go records no build time
	Modified bool   // vcs.modified: built from a tree with uncommitted changes
	Go       string // the Go toolchain
	Platform string // GOOS/GOARCH (and GOARM when set)
}

// Read returns the build info; stamped is the program's -X main.version
// value ("" when not stamped).
func Read(stamped string) Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(stamped, bi, ok)
}

func fromBuildInfo(stamped string, bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: stamped, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		if in.Version == "" {
			in.Version = "devel"
		}
		return in
	}
	in.Module = bi.Main.Version
	if bi.GoVersion != "" {
		in.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "GOARM":
			in.Platform += " GOARM=" + s.Value
		}
	}
	if in.Version == "" {
		switch {
		case in.Module != "" && in.Module != "(devel)":
			in.Version = in.Module
		case in.Commit != "":
			in.Version = "devel-" + in.Commit[:min(len(in.Commit), 12)]
			if in.Modified {
				in.Version += "-dirty"
			}
		default:
			in.Version = "devel"
		}
	}
	return in
}

// String is the --version text: "NAME VERSION" on the first line, then
// the module version, the commit and its time, the toolchain and platform.
func (in Info) String(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", name, in.Version)
	if in.Module != "" {
		fmt.Fprintf(&b, "  module  %s\n", in.Module)
	}
	if in.Commit != "" {
		c := in.Commit
		if in.Modified {
			c += " (modified)"
		}
		if in.Time != "" {
			c += " of " + in.Time
		}
		fmt.Fprintf(&b, "  commit  %s\n", c)
	}
	fmt.Fprintf(&b, "  go      %s %s\n", in.Go, in.Platform)
	return b.String()
}
