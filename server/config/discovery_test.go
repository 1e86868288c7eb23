package config

import (
	"strings"
	"testing"
)

func TestDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string // the value of "discovery"; "" leaves the key out
		want Discovery
		err  string
	}{
		{"off by default", "", Discovery{}, ""},
		{"true", `true`, Discovery{Enabled: true}, ""},
		{"false", `false`, Discovery{}, ""},
		{"object is on", `{"instance": "lab1"}`, Discovery{Enabled: true, Instance: "lab1"}, ""},
		{"object off", `{"enabled": false, "instance": "lab1"}`, Discovery{Instance: "lab1"}, ""},
		{"interface", `{"enabled": true, "interface": "eth0.100"}`, Discovery{Enabled: true, Interface: "eth0.100"}, ""},
		{"a string", `"yes"`, Discovery{}, "config: discovery: must be true, false or an object"},
		{"unknown key", `{"name": "x"}`, Discovery{}, "config: discovery.name: unknown key (known: enabled, instance, interface)"},
		{"instance with a dot", `{"instance": "lab.1"}`, Discovery{}, `config: discovery.instance: invalid instance name "lab.1"`},
		{"instance too long", `{"instance": "` + strings.Repeat("a", 64) + `"}`, Discovery{}, "config: discovery.instance: invalid instance name"},
		{"empty instance", `{"instance": ""}`, Discovery{}, "config: discovery.instance: must not be empty"},
		{"bad interface", `{"interface": "eth 0"}`, Discovery{}, `config: discovery.interface: invalid interface name "eth 0"`},
		{"enabled not a bool", `{"enabled": 1}`, Discovery{}, "config: discovery.enabled: must be a boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{` + adminCh
			if tc.in != "" {
				in += `, "discovery": ` + tc.in
			}
			cfg, err := Parse([]byte(in + `}`))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse(%s) error = %v, want %q", in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Discovery != tc.want {
				t.Fatalf("Discovery = %+v, want %+v", cfg.Discovery, tc.want)
			}
		})
	}
	if Default().Discovery.Enabled {
		t.Fatal("Default() advertises on the LAN")
	}
}
