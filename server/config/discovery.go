package config

import (
	"regexp"
)

// Discovery is the "discovery" block: advertise termserver on the LAN over
// mDNS/DNS-SD (service _termlink._tcp). Off by default. In the file it is
// either a boolean or an object:
//
//	"discovery": true
//	"discovery": {"enabled": true, "instance": "lab1", "interface": "eth0"}
type Discovery struct {
	Enabled   bool
	Instance  string // DNS-SD instance name; default: the host name's first label
	Interface string // network interface to advertise on; default: the system's multicast default
}

// instancePattern keeps an instance name one plain DNS label (RFC 6763
// allows more; a device shows it on a 16-column screen).
const instancePattern = `^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`

var instanceRE = regexp.MustCompile(instancePattern)

// ifaceRE is a Linux interface name (IFNAMSIZ 16, with the NUL).
var ifaceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,14}$`)

// discovery decodes the "discovery" block.
func (w *walker) discovery(path string, n *node) Discovery {
	if n.kind == kBool {
		return Discovery{Enabled: n.b}
	}
	if n.kind != kObject {
		w.errorf(path, "must be true, false or an object {\"enabled\", \"instance\", \"interface\"}, got %s", n.kind)
		return Discovery{}
	}
	d := Discovery{Enabled: true}
	f := w.fields(path, n, "discovery")
	if f == nil {
		return Discovery{}
	}
	if e, ok := f["enabled"]; ok {
		d.Enabled, _ = w.boolean(join(path, e.key), e.val)
	}
	if e, ok := f["instance"]; ok {
		p := join(path, e.key)
		if s, ok := w.nonEmpty(p, e.val); ok {
			if !instanceRE.MatchString(s) {
				w.errorf(p, "invalid instance name %s: must match %s", quote(s), instancePattern)
			}
			d.Instance = s
		}
	}
	if e, ok := f["interface"]; ok {
		p := join(path, e.key)
		if s, ok := w.nonEmpty(p, e.val); ok {
			if !ifaceRE.MatchString(s) {
				w.errorf(p, "invalid interface name %s (e.g. \"eth0\")", quote(s))
			}
			d.Interface = s
		}
	}
	return d
}
