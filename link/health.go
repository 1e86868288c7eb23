package link

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Device health (issue 43, extension, capability "health"): a device
// says how it is without being asked — at each connect, then at most once
// a minute, and at once when something crosses a threshold (disk low,
// hot, throttled, a new restart).
//
//	health  device -> server   the device's figures (unsolicited)
//
// The server takes health only from a connection that listed "health",
// at most one report per 30 s per connection (more are refused busy,
// through its gate), and keeps the last report per device.
const TypeHealth Type = "health"

// CapHealth: the device sends health frames.
const CapHealth = "health"

// Reasons of a device's last stop (Health.LastStop).
const (
	StopClean     = "clean"      // it stopped cleanly (its clean-stop mark was there)
	StopCrash     = "crash"      // it panicked (LastStopDetail: the panic's first line)
	StopPowerLoss = "power_loss" // no clean-stop mark and no crash: power cut, kill -9, OOM kill, reset
	StopUnknown   = "unknown"    // the first start, or the state dir could not say
)

// Throttling flags (Health.Throttled), the Raspberry Pi firmware's
// get_throttled bits as words: the state now, and the "_occurred" ones
// since boot.
const (
	ThrottleUnderVoltage          = "under_voltage"
	ThrottleFreqCapped            = "freq_capped"
	ThrottleThrottled             = "throttled"
	ThrottleSoftTempLimit         = "soft_temp_limit"
	ThrottleUnderVoltageOccurred  = "under_voltage_occurred"
	ThrottleFreqCappedOccurred    = "freq_capped_occurred"
	ThrottleThrottledOccurred     = "throttled_occurred"
	ThrottleSoftTempLimitOccurred = "soft_temp_limit_occurred"
)

// ThrottleWords are the known throttling flags, in the firmware's bit
// order (bits 0-3, then 16-19).
var ThrottleWords = []string{
	ThrottleUnderVoltage, ThrottleFreqCapped, ThrottleThrottled, ThrottleSoftTempLimit,
	ThrottleUnderVoltageOccurred, ThrottleFreqCappedOccurred, ThrottleThrottledOccurred, ThrottleSoftTempLimitOccurred,
}

// Bounds of a health report: every number is range-checked and the one
// free string (the crash's first line) bounded, so what a server keeps
// of a report is small and fixed.
const (
	MaxStopDetailBytes    = 256
	MaxUptimeSeconds      = 100 * 365 * 24 * 3600
	MaxLoad               = 10000
	MaxHealthBytes        = 1 << 50 // memory or disk, in bytes (1 PiB)
	MinTempMilliC         = -100_000
	MaxTempMilliC         = 250_000
	MaxRestartsLastHour   = 10000
	MaxHealthReconnects   = 1 << 40
	MaxHeartbeatRTTMillis = 3_600_000
)

// Health (extension) is a device's report of itself (capability
// "health"). Sizes are bytes; DiskFree and DiskFreePercent are of the
// file system that holds the device's state dir (what it may still
// write). TempMilliC is the CPU's temperature in thousandths of a °C
// (nil: the board does not say); Throttled the firmware's throttling
// flags (ThrottleWords; nil: none, or not a Raspberry Pi). LastStop is
// why the device's previous run ended (Stop*), LastStopDetail a crash's
// first line. Reconnects counts the device's reconnects since it
// started, HeartbeatRTTMillis its last heartbeat's round trip (0: not
// measured yet).
type Health struct {
	UptimeSeconds      int64    `json:"uptime_seconds"`
	Load1              float64  `json:"load1"`
	MemAvailable       int64    `json:"mem_available"`
	DiskFree           int64    `json:"disk_free"`
	DiskFreePercent    float64  `json:"disk_free_percent"`
	TempMilliC         *int64   `json:"temp_mc,omitempty"`
	Throttled          []string `json:"throttled"` // not omitempty: [] and null both round-trip
	LastStop           string   `json:"last_stop"`
	LastStopDetail     string   `json:"last_stop_detail,omitempty"`
	RestartsLastHour   int      `json:"restarts_last_hour"`
	Reconnects         int64    `json:"reconnects"`
	HeartbeatRTTMillis int64    `json:"heartbeat_rtt_ms,omitempty"`
}

func (*Health) FrameType() Type { return TypeHealth }

// healthProblem checks a decoded health frame: the field at fault and
// what is wrong with it, or "", "".
func healthProblem(f *Health) (field, msg string) {
	outside := func(v, lo, hi int64) string {
		return fmt.Sprintf("must be from %d to %d, got %d", lo, hi, v)
	}
	switch {
	case f.UptimeSeconds < 0 || f.UptimeSeconds > MaxUptimeSeconds:
		return "uptime_seconds", outside(f.UptimeSeconds, 0, MaxUptimeSeconds)
	case !(f.Load1 >= 0 && f.Load1 <= MaxLoad):
		return "load1", fmt.Sprintf("must be from 0 to %d, got %s", MaxLoad, strconv.FormatFloat(f.Load1, 'g', -1, 64))
	case f.MemAvailable < 0 || f.MemAvailable > MaxHealthBytes:
		return "mem_available", outside(f.MemAvailable, 0, MaxHealthBytes)
	case f.DiskFree < 0 || f.DiskFree > MaxHealthBytes:
		return "disk_free", outside(f.DiskFree, 0, MaxHealthBytes)
	case !(f.DiskFreePercent >= 0 && f.DiskFreePercent <= 100) || math.IsNaN(f.DiskFreePercent):
		return "disk_free_percent", "must be from 0 to 100, got " + strconv.FormatFloat(f.DiskFreePercent, 'g', -1, 64)
	case f.TempMilliC != nil && (*f.TempMilliC < MinTempMilliC || *f.TempMilliC > MaxTempMilliC):
		return "temp_mc", outside(*f.TempMilliC, MinTempMilliC, MaxTempMilliC)
	case len(f.Throttled) > len(ThrottleWords):
		return "throttled", fmt.Sprintf("holds %d flags, more than the %d there are", len(f.Throttled), len(ThrottleWords))
	case f.RestartsLastHour < 0 || f.RestartsLastHour > MaxRestartsLastHour:
		return "restarts_last_hour", outside(int64(f.RestartsLastHour), 0, MaxRestartsLastHour)
	case f.Reconnects < 0 || f.Reconnects > MaxHealthReconnects:
		return "reconnects", outside(f.Reconnects, 0, MaxHealthReconnects)
	case f.HeartbeatRTTMillis < 0 || f.HeartbeatRTTMillis > MaxHeartbeatRTTMillis:
		return "heartbeat_rtt_ms", outside(f.HeartbeatRTTMillis, 0, MaxHeartbeatRTTMillis)
	case len(f.LastStopDetail) > MaxStopDetailBytes:
		return "last_stop_detail", tooLong(len(f.LastStopDetail), MaxStopDetailBytes)
	case !utf8.ValidString(f.LastStopDetail) || hasControl(f.LastStopDetail):
		return "last_stop_detail", "holds a control character: one line of text"
	}
	switch f.LastStop {
	case StopClean, StopCrash, StopPowerLoss, StopUnknown:
	case "":
		return "last_stop", "is missing or empty"
	default:
		return "last_stop", fmt.Sprintf("must be clean, crash, power_loss or unknown; got %q", truncateQuoted(f.LastStop))
	}
	for i, w := range f.Throttled {
		at := "throttled[" + strconv.Itoa(i) + "]"
		if !slices.Contains(ThrottleWords, w) {
			return at, fmt.Sprintf("%q is not a throttling flag (under_voltage, freq_capped, throttled, soft_temp_limit, each also _occurred)", truncateQuoted(w))
		}
		if slices.Contains(f.Throttled[:i], w) {
			return at, fmt.Sprintf("%q is listed twice", w)
		}
	}
	return "", ""
}

// truncateQuoted cuts a refused value to 32 bytes for an error.
func truncateQuoted(s string) string {
	if len(s) <= 32 {
		return s
	}
	s = s[:32]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// The conditions a health report marks (Health.Conditions), what the
// server's console and metrics show of a fleet: less than
// HealthDiskLowPercent free on the state dir's file system; a CPU at
// HealthHotMilliC or more; throttled now (a flag without "_occurred");
// crash looping (the last stop a crash and HealthCrashLoopRestarts
// restarts or more in the last hour); restarted after a power loss.
const (
	HealthDiskLowPercent    = 10
	HealthHotMilliC         = 80_000
	HealthCrashLoopRestarts = 3

	ConditionDiskLow      = "disk_low"
	ConditionHot          = "hot"
	ConditionThrottled    = "throttled"
	ConditionCrashLooping = "crash_looping"
	ConditionPowerLoss    = "power_loss"
)

// HealthConditions are the conditions, in the order Conditions lists them.
var HealthConditions = []string{ConditionDiskLow, ConditionHot, ConditionThrottled, ConditionCrashLooping, ConditionPowerLoss}

// Conditions lists the conditions h marks (nil: none).
func (h *Health) Conditions() []string {
	var out []string
	if h.DiskFreePercent < HealthDiskLowPercent {
		out = append(out, ConditionDiskLow)
	}
	if h.TempMilliC != nil && *h.TempMilliC >= HealthHotMilliC {
		out = append(out, ConditionHot)
	}
	for _, w := range h.Throttled {
		if w == ThrottleUnderVoltage || w == ThrottleFreqCapped || w == ThrottleThrottled || w == ThrottleSoftTempLimit {
			out = append(out, ConditionThrottled)
			break
		}
	}
	if h.LastStop == StopCrash && h.RestartsLastHour >= HealthCrashLoopRestarts {
		out = append(out, ConditionCrashLooping)
	}
	if h.LastStop == StopPowerLoss {
		out = append(out, ConditionPowerLoss)
	}
	return out
}
