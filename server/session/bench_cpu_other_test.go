//go:build !unix

package session

import "time"

func processCPU() time.Duration { return 0 }
