package harness

import (
	"os"
	"strconv"
	"strings"
)

// sessionMembers lists the processes whose session id is sid, from /proc.
func sessionMembers(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sid {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if s, ok := statSession(string(stat)); ok && s == sid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// statSession reads the session id from a /proc/PID/stat line:
// "pid (comm) state ppid pgrp session ...", comm possibly holding spaces
// and parentheses.
func statSession(stat string) (int, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 4 {
		return 0, false
	}
	sid, err := strconv.Atoi(f[3])
	return sid, err == nil
}
