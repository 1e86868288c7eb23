//go:build !linux

package sdlisten

// checkListening leaves the check to net.FileListener where Linux's
// socket options are not at hand.
func checkListening(fd int) error { return nil }
