package cluster

import "testing"

// parseDevKey takes any key of the devices' bucket (a watch delivers
// what any client wrote): it never panics, and what it takes is the key
// of the peer it names.
func FuzzDevKey(f *testing.F) {
	f.Add(devKey{"terminal-dev", "kiosk-1"}.String())
	f.Add("p..")
	f.Add("p.YQ.Yg.Yw")
	f.Add("e.ZWRnZS0x")
	f.Add("p.!!.??")
	f.Fuzz(func(t *testing.T, key string) {
		k, ok := parseDevKey(key)
		if !ok {
			return
		}
		if k.channel == "" || k.peer == "" || k.String() != key {
			t.Fatalf("%q parsed as %+v (%q)", key, k, k.String())
		}
	})
}
