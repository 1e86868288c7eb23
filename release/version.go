package release

import (
	"fmt"
	"strconv"
	"strings"
)

// CompareVersions orders two release versions: -1 when a is older than
// b, 0 when they are the same release, 1 when a is newer. The rule
// (semver's, relaxed):
//
//   - a leading "v" is ignored, and so is build metadata after "+";
//   - the core (before the first "-") is dot-separated decimal numbers,
//     compared number by number, a missing number being 0 (1.2 == 1.2.0);
//   - a version with a pre-release part after "-" is older than the same
//     core without one (1.2.0-rc.1 < 1.2.0); pre-release parts are
//     compared identifier by identifier, numbers numerically and below
//     words, words by bytes, fewer identifiers older.
//
// A version whose core is not numbers (a VCS revision, "devel") is not
// ordered: CompareVersions returns an error naming it.
func CompareVersions(a, b string) (int, error) {
	pa, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	pb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	for i := 0; i < max(len(pa.core), len(pb.core)); i++ {
		var x, y uint64
		if i < len(pa.core) {
			x = pa.core[i]
		}
		if i < len(pb.core) {
			y = pb.core[i]
		}
		if x != y {
			return cmp(x < y), nil
		}
	}
	switch {
	case pa.pre == nil && pb.pre == nil:
		return 0, nil
	case pa.pre == nil:
		return 1, nil
	case pb.pre == nil:
		return -1, nil
	}
	for i := 0; i < min(len(pa.pre), len(pb.pre)); i++ {
		if c := comparePre(pa.pre[i], pb.pre[i]); c != 0 {
			return c, nil
		}
	}
	switch {
	case len(pa.pre) < len(pb.pre):
		return -1, nil
	case len(pa.pre) > len(pb.pre):
		return 1, nil
	}
	return 0, nil
}

func cmp(less bool) int {
	if less {
		return -1
	}
	return 1
}

type version struct {
	core []uint64
	pre  []string // nil: a release
}

func parseVersion(s string) (version, error) {
	v := strings.TrimPrefix(s, "v")
	v, _, _ = strings.Cut(v, "+")
	core, pre, hasPre := strings.Cut(v, "-")
	var out version
	for _, p := range strings.Split(core, ".") {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil || p == "" || len(out.core) == 8 {
			return version{}, fmt.Errorf("version %q is not ordered (want numbers like 1.4.2, v1.4.2 or 1.5.0-rc.1)", s)
		}
		out.core = append(out.core, n)
	}
	if hasPre {
		out.pre = strings.Split(pre, ".")
		for _, id := range out.pre {
			if id == "" {
				return version{}, fmt.Errorf("version %q: empty pre-release identifier", s)
			}
		}
	}
	return out, nil
}

func comparePre(a, b string) int {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		if x == y {
			return 0
		}
		return cmp(x < y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}
