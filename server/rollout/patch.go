package rollout

import (
	"strings"

	"termlink/link"
	"termlink/release"
)

// Patches (issue 43): a rollout sends a device a patch instead of the
// whole binary when the binary the device said it runs at connect
// (binary_sha256) is a stored patch's source. The update frame keeps the
// whole binary's url and manifest beside the patch's: the device falls
// back to them by itself when the patch fails.

// patchStore is the release store's patches; a Releases without them
// (a test's) sends whole binaries only.
type patchStore interface {
	Patch(version, platform, fromSHA256 string) (*release.PatchManifest, bool)
}

// offerPatch adds to f the patch of r's release that makes it of the
// binary d runs, when one is stored.
func (m *Manager) offerPatch(r *Rollout, d *Device, f *link.Update) {
	d.Delivery = "" // a new attempt: what it says of this one
	ps, ok := m.opt.Releases.(patchStore)
	if !ok {
		return
	}
	p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID)
	if !ok || p.BinarySHA256 == "" {
		return
	}
	pm, ok := ps.Patch(r.Version, d.Platform, p.BinarySHA256)
	if !ok {
		return
	}
	base, ok := strings.CutSuffix(f.URL, "/binary")
	if !ok {
		return // a download route of another shape: the whole binary
	}
	f.PatchURL = base + "/patches/" + p.BinarySHA256
	f.PatchManifest = string(pm.Marshal())
}

// patchNote is what a device's downloading or restarting report says
// of its patch ("patched: ...", "patch failed: ...; fetched the full
// binary"), or "".
func patchNote(reason string) string {
	if strings.HasPrefix(reason, "patched: ") || strings.HasPrefix(reason, "patch failed: ") {
		return reason
	}
	return ""
}

// notePatchLocked keeps what a device said of its patch as its Delivery
// (through restarting, installed and after; a new attempt clears it).
func (m *Manager) notePatchLocked(e *entry, d *Device, reason string) {
	note := patchNote(reason)
	if len(note) > maxReason {
		note = note[:maxReason]
	}
	if note == "" || d.Delivery == note {
		return
	}
	d.Delivery = note
	m.dirty[e.r.ID] = true
}
