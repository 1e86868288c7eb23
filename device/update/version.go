package update

import "termlink/release"

// CompareVersions orders two release versions (release.CompareVersions:
// the one rule termd's updates and the server's rollouts share).
func CompareVersions(a, b string) (int, error) { return release.CompareVersions(a, b) }
