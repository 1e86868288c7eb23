package device

// The Linux drivers periph.io/x/host/v3 registers on every architecture
// (its host_linux.go): GPIO lines through the kernel's character device,
// I²C and SPI buses, LEDs and sysfs GPIO. See initPeriphHost.
import (
	_ "periph.io/x/host/v3/gpioioctl"
	_ "periph.io/x/host/v3/netlink"
	_ "periph.io/x/host/v3/sysfs"
)
