package device

import (
	"runtime"
	"slices"
	"testing"

	"periph.io/x/conn/v3/driver/driverreg"
)

// The periph drivers termd registers are Linux's generic ones and, on ARM,
// the Raspberry Pi's: exactly those, so that periph.io/x/host/v3's full
// set (every other board's drivers, about 200 KB of termd) does not come
// back through an import of it.
func TestPeriphHostDrivers(t *testing.T) {
	if err := initPeriphHost(); err != nil {
		t.Fatalf("initPeriphHost: %v", err)
	}
	st, err := driverreg.Init() // once per process: the state initPeriphHost made
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range st.Loaded {
		got = append(got, d.String())
	}
	for _, f := range slices.Concat(st.Skipped, st.Failed) {
		got = append(got, f.D.String())
	}
	want := []string{"ioctl-gpio", "netlink-onewire", "sysfs-gpio", "sysfs-i2c", "sysfs-led", "sysfs-spi", "sysfs-thermal"}
	if runtime.GOARCH == "arm" || runtime.GOARCH == "arm64" {
		want = append(want, "bcm283x-dma", "bcm283x-gpio", "rpi")
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("periph drivers registered (loaded, skipped or failed) on %s:\n got %q\nwant %q", runtime.GOARCH, got, want)
	}
}
