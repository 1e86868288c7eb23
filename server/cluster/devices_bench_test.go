package cluster

import (
	"fmt"
	"testing"
	"time"

	"termlink/server/cluster/natstest"
	"termlink/server/config"
	"termlink/server/registry"
)

// BenchmarkDevicesVisible measures how long 1,000 devices connecting to
// one edge at once (as when another edge died) take to show online on
// another node: the write-behind's wait (Flush, 1 s), one publish of
// 1,000 records (devicesWriters at a time) and the watch.
func BenchmarkDevicesVisible(b *testing.B) {
	for i := range b.N {
		b.StopTimer()
		url := natstest.Start(b, true).ClientURL()
		a := openDevices(b, url, "edge-a", config.RoleEdge, DevicesOptions{Flush: DefaultDevicesFlush})
		w := openDevices(b, url, "worker-1", config.RoleWorker, DevicesOptions{Flush: DefaultDevicesFlush})
		b.StartTimer()
		start := time.Now()
		for j := range 1000 {
			if _, _, err := a.d.Connected(registry.Device{ChannelID: "ch", PeerID: fmt.Sprintf("k-%d-%04d", i, j), Authenticated: true}); err != nil {
				b.Fatal(err)
			}
		}
		for n := 0; n < 1000; n, _ = w.d.Online("ch", 0) {
			time.Sleep(5 * time.Millisecond)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms-to-visible")
	}
}
