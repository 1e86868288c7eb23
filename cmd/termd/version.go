package main

import "termlink/internal/buildinfo"

// version is termd's version; release builds set it with
// -ldflags "-X main.version=v1.2.3" (make pi does). Otherwise it comes
// from the build info (module version, or the VCS revision).
var version = ""

// termdVersion returns the version termd reports (connect's version).
func termdVersion() string { return buildinfo.Read(version).Version }

// versionText is what --version prints: the version, then the module
// version, commit and toolchain.
func versionText() string { return buildinfo.Read(version).String("termd") }
