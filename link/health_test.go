package link

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeHealth(t *testing.T) {
	temp := int64(61500)
	wire := `{"type":"health","uptime_seconds":3600,"load1":0.25,"mem_available":104857600,"disk_free":1048576,"disk_free_percent":4.5,"temp_mc":61500,"throttled":["under_voltage","throttled_occurred"],"last_stop":"crash","last_stop_detail":"panic: boom","restarts_last_hour":3,"reconnects":2,"heartbeat_rtt_ms":40}`
	want := &Health{UptimeSeconds: 3600, Load1: 0.25, MemAvailable: 100 << 20, DiskFree: 1 << 20, DiskFreePercent: 4.5, TempMilliC: &temp,
		Throttled: []string{ThrottleUnderVoltage, ThrottleThrottledOccurred}, LastStop: StopCrash, LastStopDetail: "panic: boom",
		RestartsLastHour: 3, Reconnects: 2, HeartbeatRTTMillis: 40}
	got, err := Decode([]byte(wire))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode = %#v, want %#v", got, want)
	}
	b, err := Encode(got)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Decode(b); err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("round trip: %s, %v", b, err)
	}
	// The optional figures may be left out.
	min := `{"type":"health","uptime_seconds":1,"load1":0,"mem_available":0,"disk_free":0,"disk_free_percent":0,"throttled":null,"last_stop":"unknown","restarts_last_hour":0,"reconnects":0}`
	if _, err := Decode([]byte(min)); err != nil {
		t.Fatalf("Decode(%s): %v", min, err)
	}
}

func TestDecodeHealthRefusesNamingTheField(t *testing.T) {
	base := map[string]string{
		"uptime_seconds": "1", "load1": "0.5", "mem_available": "1", "disk_free": "1", "disk_free_percent": "50",
		"throttled": "[]", "last_stop": `"clean"`, "restarts_last_hour": "0", "reconnects": "0",
	}
	wire := func(k, v string) string {
		var b strings.Builder
		b.WriteString(`{"type":"health"`)
		for _, key := range []string{"uptime_seconds", "load1", "mem_available", "disk_free", "disk_free_percent", "throttled", "last_stop", "restarts_last_hour", "reconnects"} {
			val := base[key]
			if key == k {
				val = v
			}
			if val != "" {
				b.WriteString(`,"` + key + `":` + val)
			}
		}
		if _, known := base[k]; !known {
			b.WriteString(`,"` + k + `":` + v)
		}
		return b.String() + "}"
	}
	for _, c := range []struct{ key, val, field, msg string }{
		{"uptime_seconds", "-1", "uptime_seconds", "must be from 0"},
		{"uptime_seconds", "99999999999", "uptime_seconds", "must be from 0"},
		{"load1", "-0.5", "load1", "must be from 0 to 10000"},
		{"load1", "1e9", "load1", "must be from 0 to 10000"},
		{"mem_available", "-1", "mem_available", "must be from 0"},
		{"disk_free", "1e300", "disk_free", ""},
		{"disk_free_percent", "100.5", "disk_free_percent", "must be from 0 to 100"},
		{"temp_mc", "300000", "temp_mc", "must be from -100000 to 250000"},
		{"throttled", `["under_voltage","under_voltage"]`, "throttled[1]", "listed twice"},
		{"throttled", `["melting"]`, "throttled[0]", "not a throttling flag"},
		{"throttled", `["a","b","c","d","e","f","g","h","i"]`, "throttled", "more than the 8"},
		{"last_stop", `""`, "last_stop", "missing"},
		{"last_stop", `"nap"`, "last_stop", "must be clean, crash, power_loss or unknown"},
		{"last_stop_detail", `"` + strings.Repeat("x", MaxStopDetailBytes+1) + `"`, "last_stop_detail", "257 bytes, more than 256"},
		{"last_stop_detail", `"panic: a\nb"`, "last_stop_detail", "control character"},
		{"restarts_last_hour", "-2", "restarts_last_hour", "must be from 0 to 10000"},
		{"reconnects", "-1", "reconnects", "must be from 0"},
		{"heartbeat_rtt_ms", "-5", "heartbeat_rtt_ms", "must be from 0"},
		{"Load1", "1", "Load1", "keys are case-sensitive"},
	} {
		w := wire(c.key, c.val)
		_, err := Decode([]byte(w))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("Decode(%.120s) = %v, want a *DecodeError", w, err)
		}
		if de.Field != c.field || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Decode(%.120s): field %q, %v; want field %q saying %q", w, de.Field, err, c.field, c.msg)
		}
	}
}
