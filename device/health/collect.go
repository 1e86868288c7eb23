// Package health is what termd says of its own health (issue 43,
// capability "health"): the figures read from the board (Collect: uptime,
// load, memory, the state dir's free space, the CPU's temperature, the
// Raspberry Pi firmware's throttling flags), why the last run stopped and
// how often termd started in the last hour (Boot, from marks in the state
// dir), and when a report is due (Due).
//
// Every file is read under Sources.Root, so tests give a fake /proc and
// /sys; a figure the board does not expose is left out, never an error
// that stops the others.
package health

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"termlink/link"
)

// Sources are where the figures are read.
type Sources struct {
	// Root is the file system root /proc and /sys are read under ("":
	// "/").
	Root string
	// StateDir is the directory whose file system's free space is
	// reported.
	StateDir string
	// Statfs gives the bytes free (for an unprivileged process) and in
	// all of the file system holding path; nil: statfs(2).
	Statfs func(path string) (free, total uint64, err error)
	// Vcgencmd, when set, prints the firmware's throttled value
	// ("throttled=0x50005") where the sysfs file is missing; nil: the
	// file only. Never required (VcgencmdThrottled runs the tool).
	Vcgencmd func() (string, error)
}

// Figures are what Collect read: a link.Health without the stop reason,
// the restarts and the link figures (Boot and the client give those).
// Problems lists the figures that could not be read, for the log.
type Figures struct {
	link.Health
	Problems []string
}

// maxRead bounds what is read of one /proc or /sys file.
const maxRead = 16 << 10

func (s Sources) path(p string) string {
	root := s.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, p)
}

func (s Sources) read(p string) ([]byte, error) {
	f, err := os.Open(s.path(p))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, maxRead)
	n, err := f.Read(buf)
	if n == 0 && err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// Collect reads the figures. Those the board does not have are left at
// their zero (TempMilliC nil, Throttled nil); those that fail to read
// are named in Problems.
func Collect(s Sources) Figures {
	var f Figures
	problem := func(what string, err error) {
		f.Problems = append(f.Problems, what+": "+err.Error())
	}
	if up, err := s.uptime(); err != nil {
		problem("/proc/uptime", err)
	} else {
		f.UptimeSeconds = up
	}
	if l, err := s.load1(); err != nil {
		problem("/proc/loadavg", err)
	} else {
		f.Load1 = l
	}
	if m, err := s.memAvailable(); err != nil {
		problem("/proc/meminfo", err)
	} else {
		f.MemAvailable = m
	}
	if free, pct, err := s.disk(); err != nil {
		problem("statfs "+s.StateDir, err)
	} else {
		f.DiskFree, f.DiskFreePercent = free, pct
	}
	if t, ok := s.temperature(); ok {
		f.TempMilliC = &t
	}
	if bits, ok := s.throttledBits(); ok {
		f.Throttled = ThrottledWords(bits)
	}
	return f
}

func (s Sources) uptime() (int64, error) {
	b, err := s.read("proc/uptime")
	if err != nil {
		return 0, err
	}
	field, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	v, err := strconv.ParseFloat(field, 64)
	if err != nil || v < 0 || v > link.MaxUptimeSeconds {
		return 0, fmt.Errorf("not an uptime: %q", truncate(field))
	}
	return int64(v), nil
}

func (s Sources) load1() (float64, error) {
	b, err := s.read("proc/loadavg")
	if err != nil {
		return 0, err
	}
	field, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	v, err := strconv.ParseFloat(field, 64)
	if err != nil || !(v >= 0 && v <= link.MaxLoad) {
		return 0, fmt.Errorf("not a load: %q", truncate(field))
	}
	return v, nil
}

func (s Sources) memAvailable() (int64, error) {
	b, err := s.read("proc/meminfo")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || kb < 0 || kb > link.MaxHealthBytes>>10 || (unit != "" && unit != "kB") {
			return 0, fmt.Errorf("MemAvailable is not a size: %q", truncate(rest))
		}
		return kb << 10, nil
	}
	return 0, errors.New("no MemAvailable line")
}

func (s Sources) disk() (free int64, pct float64, err error) {
	statfs := s.Statfs
	if statfs == nil {
		statfs = statfsFree
	}
	f, total, err := statfs(s.StateDir)
	if err != nil {
		return 0, 0, err
	}
	if total == 0 {
		return 0, 0, errors.New("the file system reports no size")
	}
	f = min(f, total, uint64(link.MaxHealthBytes))
	pct = math.Round(float64(f)/float64(total)*1000) / 10 // one decimal
	return int64(f), min(pct, 100), nil
}

// statfsFree is statfs(2): the blocks an unprivileged process may still
// write (Bavail), and all of them.
func statfsFree(path string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	bs := uint64(st.Bsize) //nolint:unconvert // int32 on some platforms
	return uint64(st.Bavail) * bs, uint64(st.Blocks) * bs, nil
}

// temperature is the hottest of /sys/class/thermal/thermal_zone*/temp
// (milli-degrees C); false when there is none.
func (s Sources) temperature() (int64, bool) {
	zones, _ := filepath.Glob(s.path("sys/class/thermal/thermal_zone*/temp"))
	var best int64
	found := false
	for _, z := range zones {
		rel, err := filepath.Rel(s.path(""), z)
		if err != nil {
			continue
		}
		b, err := s.read(rel)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v < link.MinTempMilliC || v > link.MaxTempMilliC {
			continue
		}
		if !found || v > best {
			best, found = v, true
		}
	}
	return best, found
}

// throttledFile is where the Raspberry Pi firmware's driver exposes
// get_throttled (a hex number; the same bits vcgencmd get_throttled
// prints).
const throttledFile = "sys/devices/platform/soc/soc:firmware/get_throttled"

func (s Sources) throttledBits() (uint32, bool) {
	b, err := s.read(throttledFile)
	if err != nil {
		if s.Vcgencmd == nil {
			return 0, false
		}
		out, err := s.Vcgencmd()
		if err != nil {
			return 0, false
		}
		b = []byte(out)
	}
	v, ok := ParseThrottled(string(b))
	return v, ok
}

// VcgencmdThrottled runs `vcgencmd get_throttled` (at most 2 s), for
// Sources.Vcgencmd; an error when the tool is not there.
func VcgencmdThrottled() (string, error) {
	path, err := exec.LookPath("vcgencmd")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "get_throttled").Output()
	if len(out) > 64 {
		out = out[:64]
	}
	return string(out), err
}

// ParseThrottled reads the firmware's throttled value: "50005",
// "0x50005" or vcgencmd's "throttled=0x50005".
func ParseThrottled(s string) (uint32, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "throttled=")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(s, 16, 32)
	return uint32(v), err == nil
}

// throttleBits are the firmware's bits of link.ThrottleWords, in order.
var throttleBits = []uint{0, 1, 2, 3, 16, 17, 18, 19}

// ThrottledWords decodes the firmware's throttled bits into
// link.ThrottleWords (nil when none is set; unknown bits ignored).
func ThrottledWords(bits uint32) []string {
	var out []string
	for i, b := range throttleBits {
		if bits&(1<<b) != 0 {
			out = append(out, link.ThrottleWords[i])
		}
	}
	return out
}

// ThrottledNow reports whether words hold a flag of the state now (not
// only an "_occurred" one).
func ThrottledNow(words []string) bool {
	return slices.ContainsFunc(words, func(w string) bool { return !strings.HasSuffix(w, "_occurred") })
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
