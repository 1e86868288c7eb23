//go:build arm || arm64

package device

// The Raspberry Pi's drivers, on the architectures periph.io/x/host/v3
// registers them on (its host_arm.go and host_arm64.go): the BCM283x SoC's
// GPIO and the board's header names. See initPeriphHost.
import (
	_ "periph.io/x/host/v3/bcm283x"
	_ "periph.io/x/host/v3/rpi"
)
