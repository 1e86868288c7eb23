package load

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// Linux fixes at 100 for that interface on every architecture.
const userHZ = 100

// processCPU is the CPU time (user + system) process pid has used, from
// /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("server pid %d: %w", pid, err)
	}
	return parseStatCPU(path, data)
}

// parseStatCPU reads utime and stime from the text of /proc/PID/stat.
func parseStatCPU(path string, data []byte) (time.Duration, error) {
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields counted here start after its closing one, at field 3.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command name in %q", path, data)
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%s: %d fields after the command name, want at least 13", path, len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] { // utime (field 14) and stime (field 15)
		n, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: cpu time %q: %w", path, f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// serverCPU measures the server's CPU time over the send and drain phase.
type serverCPU struct {
	pid      int
	at, used time.Duration
	replies  int64
	err      error
}

func (c *serverCPU) start(pid int) {
	if pid <= 0 {
		return
	}
	c.pid = pid
	c.at, c.err = processCPU(pid)
}

func (c *serverCPU) stop(replies int64) {
	if c.pid <= 0 || c.err != nil {
		return
	}
	end, err := processCPU(c.pid)
	if err != nil {
		c.err = err
		return
	}
	c.used, c.replies = end-c.at, replies
}

func (c *serverCPU) fill(rep *Report) {
	switch {
	case c.pid <= 0:
	case c.err != nil:
		rep.ServerCPUError = c.err.Error()
	default:
		rep.ServerCPUMs = ms(c.used)
		rep.ServerCPUReplies = c.replies
		if c.replies > 0 {
			rep.ServerCPUPerReplyUs = float64(c.used) / float64(time.Microsecond) / float64(c.replies)
		}
	}
}

// ProcessCPU is the CPU time (user + system) process pid has used so
// far, from /proc/PID/stat (for other rigs' figures: testrig/fleetsim).
func ProcessCPU(pid int) (time.Duration, error) { return processCPU(pid) }
