//go:build !linux

package harness

// sessionMembers lists the processes of a session; only Linux lists them.
func sessionMembers(int) []int { return nil }
