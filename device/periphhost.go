package device

import "periph.io/x/conn/v3/driver/driverreg"

// initPeriphHost initialises periph's host drivers: what periph's
// host.Init does, over the drivers the device package registers itself
// (periphhost_linux.go, periphhost_pi.go) instead of periph.io/x/host/v3's
// full set. host.Init's package imports every board periph knows
// (Allwinner, AM335x, BeagleBone, C.H.I.P., ODROID-C1, Pine64) for the
// init of each to find it is not on that board; termlink's boards are
// Raspberry Pis, and those drivers were about 200 KB of termd for ARMv6.
// On a Raspberry Pi the same drivers load as with host.Init (none of the
// Pi's drivers depend on the others); on any other Linux board periph's
// generic drivers still open the kernel's GPIO lines (by their names in
// the device tree) and I²C buses.
func initPeriphHost() error {
	_, err := driverreg.Init()
	return err
}
