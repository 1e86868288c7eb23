package checks

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"go.bug.st/serial"
)

// DeviceKind says what kind of device a path is, for ExplainOpen.
type DeviceKind int

// Device kinds.
const (
	I2CDevice    DeviceKind = iota + 1 // /dev/i2c-N
	SerialDevice                       // /dev/ttyAMA0, /dev/serial0, /dev/ttyUSB0
	GPIODevice                         // /dev/gpiochipN or a pin name
)

// Problem classifies why a device could not be used.
type Problem int

// Problems ExplainOpen recognises.
const (
	OtherProblem Problem = iota
	Missing              // the device node does not exist
	Permission           // the user may not open it
	Busy                 // another process holds it
	NotADevice           // it is not the kind of device expected
)

func (p Problem) String() string {
	switch p {
	case Missing:
		return "missing"
	case Permission:
		return "permission denied"
	case Busy:
		return "busy"
	case NotADevice:
		return "not a device"
	}
	return "error"
}

// DeviceError is a device that could not be opened, with what to do about
// it.
type DeviceError struct {
	Kind    DeviceKind
	Device  string // path or name
	Problem Problem
	Hint    string // what to do, one sentence
	Err     error  // the underlying error
}

func (e *DeviceError) Error() string {
	var what string
	switch e.Problem {
	case Missing:
		what = "not found"
	case Permission:
		what = "permission denied"
	case Busy:
		what = "busy"
	case NotADevice:
		what = "not a " + e.kindName()
	default:
		what = e.Err.Error()
	}
	if e.Hint == "" {
		return e.Device + " " + what
	}
	return e.Device + " " + what + ": " + e.Hint
}

func (e *DeviceError) Unwrap() error { return e.Err }

func (e *DeviceError) kindName() string {
	switch e.Kind {
	case I2CDevice:
		return "I2C bus"
	case SerialDevice:
		return "serial port"
	case GPIODevice:
		return "GPIO chip"
	}
	return "device"
}

// Group is the Unix group that gives access to devices of kind k on
// Raspberry Pi OS and Debian.
func (k DeviceKind) Group() string {
	switch k {
	case I2CDevice:
		return "i2c"
	case SerialDevice:
		return "dialout"
	case GPIODevice:
		return "gpio"
	}
	return ""
}

// ExplainOpen turns an error met opening device (of kind k) into a
// *DeviceError that says what to do: enable the interface when the node is
// missing, join the group when permission is denied, find the other user
// of a busy port. Errors it does not recognise are wrapped with the device
// name. It returns nil for a nil err.
func ExplainOpen(k DeviceKind, device string, err error) error {
	if err == nil {
		return nil
	}
	var de *DeviceError
	if errors.As(err, &de) {
		return err
	}
	e := &DeviceError{Kind: k, Device: device, Problem: Classify(err), Err: err}
	switch e.Problem {
	case Missing:
		switch k {
		case I2CDevice:
			e.Hint = "enable I2C (raspi-config nonint do_i2c 0) and reboot, or check the bus number with ls /dev/i2c-*"
		case SerialDevice:
			e.Hint = "enable the UART (raspi-config nonint do_serial_hw 0) and reboot, or check the adapter is plugged in (ls /dev/tty{AMA,S,USB,ACM}*)"
		case GPIODevice:
			e.Hint = "no GPIO chip: is this a board with GPIO (ls /dev/gpiochip*)?"
		}
	case Permission:
		e.Hint = fmt.Sprintf("join the %s group (sudo usermod -aG %s $USER, then log out and in again)", k.Group(), k.Group())
	case Busy:
		switch k {
		case SerialDevice:
			e.Hint = "another process has it open (a login console? raspi-config nonint do_serial_cons 1; find it with fuser " + device + ")"
		default:
			e.Hint = "another process has it open (find it with fuser " + device + ")"
		}
	case NotADevice:
		e.Hint = "check the path"
	}
	return e
}

// Classify says what kind of problem err is: it recognises fs and errno
// errors, go.bug.st/serial's PortError codes and the messages periph's host
// drivers format them into.
func Classify(err error) Problem {
	var pe *serial.PortError
	if errors.As(err, &pe) {
		switch pe.Code() {
		case serial.PortBusy:
			return Busy
		case serial.PortNotFound:
			return Missing
		case serial.PermissionDenied:
			return Permission
		case serial.InvalidSerialPort:
			return NotADevice
		}
	}
	var pv serial.PortError
	if errors.As(err, &pv) {
		return Classify(&pv)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENODEV):
		return Missing
	case errors.Is(err, fs.ErrPermission):
		return Permission
	case errors.Is(err, syscall.EBUSY):
		return Busy
	case errors.Is(err, syscall.ENOTTY):
		return NotADevice
	}
	// periph's drivers format errno values with %v.
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "no such file or directory"), strings.Contains(msg, "is not configured"):
		return Missing
	case strings.Contains(msg, "permission denied"), strings.Contains(msg, "operation not permitted"):
		return Permission
	case strings.Contains(msg, "device or resource busy"):
		return Busy
	}
	return OtherProblem
}
