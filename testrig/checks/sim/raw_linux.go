package sim

import (
	"os"

	"golang.org/x/sys/unix"
)

// makeRaw puts a terminal in raw mode (cfmakeraw), best effort.
func makeRaw(tty *os.File) {
	t, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		return
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	_ = unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, t)
}
