package sdlisten

import (
	"errors"
	"syscall"
)

// checkListening says what fd is if it is not a listening stream socket.
func checkListening(fd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return errors.New("not open (" + err.Error() + ")")
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return errors.New("not a socket")
	}
	typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE)
	if err != nil {
		return err
	}
	if typ != syscall.SOCK_STREAM {
		return errors.New("not a stream socket (a .socket unit's ListenStream= makes one)")
	}
	acc, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
	if err != nil {
		return err
	}
	if acc == 0 {
		return errors.New("a connected stream socket, not a listening one (the .socket unit must have Accept=no)")
	}
	return nil
}
