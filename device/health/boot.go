package health

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"termlink/link"
)

// The marks in the state dir that say why the last run stopped:
//
//   - CleanStopFile: written when termd stops by itself (CleanStop),
//     removed at each start;
//   - CrashFile: emptied at each start and given to the Go runtime as its
//     crash output (debug.SetCrashOutput), so an unrecovered panic or a
//     fatal error in any goroutine leaves its report there as the
//     process dies;
//   - StartsFile: the starts of the last hour, one Unix second a line, at
//     most MaxStarts;
//   - BootIDFile: the kernel's boot id (/proc/sys/kernel/random/boot_id)
//     at the last start.
//
// A crash report: crash. No report but the clean-stop mark: clean.
// Neither, after an earlier start: killed (a crash, KilledDetail) when
// the system has not restarted since (the same boot id: kill -9, the OOM
// killer), else power loss (a power cut, a reset: the system restarted
// and nothing could write). Nothing at all: the first start, unknown.
const (
	CleanStopFile = "clean-stop"
	CrashFile     = "crash.log"
	StartsFile    = "starts"
	BootIDFile    = "boot-id"
	MaxStarts     = 64
)

// KilledDetail is the crash detail of a run that ended with no clean stop
// and no crash report while the system kept running.
const KilledDetail = "killed: no clean stop, no crash report, and the system did not restart (kill -9, the OOM killer)"

// Boot is what this start found of the last run.
type Boot struct {
	LastStop         string // link.Stop*
	LastStopDetail   string // a crash's first line (bounded: link.MaxStopDetailBytes)
	RestartsLastHour int    // starts before this one in the last hour
	// Err is why the state dir could not say or keep all of it (Start's
	// error), for the log.
	Err error
}

// Options of Start.
type Options struct {
	// CaptureCrash makes the crash file the runtime's crash output
	// (process-wide: termd's worker sets it, tests mostly do not).
	CaptureCrash bool
	// BootID is the kernel's boot id now (ReadBootID); "" where it cannot
	// be read: then a stop without a mark is taken for power loss.
	BootID string
}

// ReadBootID reads the kernel's boot id under root ("/" on the device),
// "" when it cannot.
func ReadBootID(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
	if err != nil || len(b) > 64 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Start reads why the last run stopped and the starts of the last hour,
// then readies the state dir for this run: the clean-stop mark removed,
// the crash file emptied (and, with CaptureCrash, made the crash output),
// this start added to the start log. A state dir that does not work
// gives what could be read and an error to log; termd runs anyway.
func Start(dir string, now time.Time, opt Options) (Boot, error) {
	var errs []error
	b := Boot{LastStop: link.StopUnknown}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		errs = append(errs, err)
	}
	crash, err := firstLine(filepath.Join(dir, CrashFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	_, cleanErr := os.Stat(filepath.Join(dir, CleanStopFile))
	starts, err := readStarts(filepath.Join(dir, StartsFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	lastBoot := ""
	if lb, err := os.ReadFile(filepath.Join(dir, BootIDFile)); err == nil && len(lb) <= 64 {
		lastBoot = strings.TrimSpace(string(lb))
	}
	switch {
	case crash != "":
		b.LastStop, b.LastStopDetail = link.StopCrash, crash
	case cleanErr == nil:
		b.LastStop = link.StopClean
	case len(starts) > 0 && opt.BootID != "" && lastBoot == opt.BootID:
		b.LastStop, b.LastStopDetail = link.StopCrash, KilledDetail
	case len(starts) > 0:
		b.LastStop = link.StopPowerLoss
	}
	if opt.BootID != "" {
		if err := os.WriteFile(filepath.Join(dir, BootIDFile), []byte(opt.BootID+"\n"), 0o600); err != nil {
			errs = append(errs, fmt.Errorf("the boot id: %w", err))
		}
	}
	hourAgo := now.Add(-time.Hour).Unix()
	starts = slices.DeleteFunc(starts, func(t int64) bool { return t <= hourAgo || t > now.Unix() })
	b.RestartsLastHour = min(len(starts), link.MaxRestartsLastHour)

	if err := os.Remove(filepath.Join(dir, CleanStopFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing the clean-stop mark: %w", err))
	}
	f, err := os.OpenFile(filepath.Join(dir, CrashFile), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		errs = append(errs, fmt.Errorf("the crash file: %w", err))
	} else {
		if opt.CaptureCrash {
			if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
				errs = append(errs, fmt.Errorf("the crash output: %w", err))
			}
		}
		f.Close() // SetCrashOutput keeps its own descriptor
	}
	starts = append(starts, now.Unix())
	if len(starts) > MaxStarts {
		starts = starts[len(starts)-MaxStarts:]
	}
	if err := writeStarts(dir, starts); err != nil {
		errs = append(errs, err)
	}
	b.Err = errors.Join(errs...)
	return b, b.Err
}

// CleanStop writes the clean-stop mark: termd stopped by itself.
func CleanStop(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, CleanStopFile), nil, 0o600); err != nil {
		return fmt.Errorf("the clean-stop mark: %w", err)
	}
	return nil
}

// firstLine is the first non-empty line of the crash file, made one line
// of at most link.MaxStopDetailBytes of text without control characters.
func firstLine(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, _ := f.Read(buf)
	sc := bufio.NewScanner(bytes.NewReader(buf[:n]))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			return StopDetail(line), nil
		}
	}
	return "", nil
}

// StopDetail makes s a stop's detail: valid UTF-8, control characters as
// spaces, cut to link.MaxStopDetailBytes on a character boundary.
func StopDetail(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > link.MaxStopDetailBytes {
		s = s[:link.MaxStopDetailBytes]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// readStarts reads the start log; lines that are not Unix seconds are
// skipped (a torn write).
func readStarts(path string) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxStarts*24 {
		b = b[len(b)-MaxStarts*24:]
	}
	var out []int64
	for _, line := range strings.Split(string(b), "\n") {
		if v, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	return out, nil
}

// writeStarts replaces the start log (a temporary file renamed over it).
func writeStarts(dir string, starts []int64) error {
	var b []byte
	for _, t := range starts {
		b = strconv.AppendInt(b, t, 10)
		b = append(b, '\n')
	}
	tmp := filepath.Join(dir, StartsFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("the start log: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, StartsFile)); err != nil {
		return fmt.Errorf("the start log: %w", err)
	}
	return nil
}
