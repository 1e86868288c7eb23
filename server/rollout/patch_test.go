package rollout

import (
	"strings"
	"testing"

	"termlink/link"

	"termlink/release"
)

// patchReleases is releasesOf with one stored patch of v2 linux/arm/6
// from the binary "from".
type patchReleases struct {
	releasesOf
	from string
}

func (r patchReleases) Patch(version, platform, from string) (*release.PatchManifest, bool) {
	if version != "v2" || platform != "linux/arm/6" || from != r.from {
		return nil, false
	}
	return &release.PatchManifest{Version: version, Platform: platform, FromSHA256: from, PatchSize: 10}, true
}

// A device whose connect named a stored patch's source is sent the
// patch beside the whole binary; one running another binary, or saying
// none, the whole binary only.
func TestRolloutSendsPatchToItsSource(t *testing.T) {
	from, other := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	f := fleetOf(3)
	for id, sum := range map[string]string{"d01": from, "d02": other} {
		p := f.peers[id]
		p.BinarySHA256 = sum
		f.peers[id] = p
	}
	m := open(t, f, t.TempDir(), func(o *Options) { o.Releases = patchReleases{releasesOf{f}, from} })
	if _, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Percent: 100}, "otto"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sent) != 3 {
		t.Fatalf("%d frames sent, want 3", len(f.sent))
	}
	for i, u := range f.sent {
		peer := f.sentTo[i]
		if !strings.HasSuffix(u.URL, "/binary") {
			t.Errorf("%s: url %q", peer, u.URL)
		}
		switch peer {
		case "d01":
			if u.PatchURL != "/api/channels/"+ch+"/releases/v2/linux/arm/6/patches/"+from || !strings.Contains(u.PatchManifest, from) {
				t.Errorf("d01: patch %q %q", u.PatchURL, u.PatchManifest)
			}
		default:
			if u.PatchURL != "" || u.PatchManifest != "" {
				t.Errorf("%s: sent a patch %q", peer, u.PatchURL)
			}
		}
	}
}

// What a device says of its patch stays the device's delivery through
// restarting (again, from the new binary's start report) and installed;
// another reason of those states is dropped as before.
func TestRolloutKeepsPatchNote(t *testing.T) {
	f := fleetOf(2)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Percent: 100}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	const note = "patch failed: corrupt patch; fetched the full binary"
	report(m, "d01", "v2", link.UpdateDownloading, "whatever")
	report(m, "d01", "v2", link.UpdateRestarting, note)
	report(m, "d01", "v2", link.UpdateRestarting, "") // the new binary's start report says nothing of it
	report(m, "d02", "v2", link.UpdateRestarting, "something else")
	install(m, f, "d01", "d02")
	got := state(t, m, r.ID)
	for _, d := range got.Devices {
		want := map[string]string{"d01": note, "d02": ""}[d.PeerID]
		if d.State != Installed || d.Reason != "" || d.Delivery != want {
			t.Errorf("%s: %s %q delivery %q, want installed, delivery %q", d.PeerID, d.State, d.Reason, d.Delivery, want)
		}
	}
}
