package termd

import (
	"log/slog"
	"os"
	"strings"
	"sync"

	"termlink/device/update"
	"termlink/link"
	"termlink/release"
)

// patchOptions sets opt's patch (issue 43) from an update frame that
// carries one: its manifest parsed (the signature is update.Apply's to
// check, before any download), its url resolved on the channel's
// server. A patch that cannot be used is a note, and the whole binary
// is fetched. note returns how the patch went, for the restarting
// report ("" without a patch); a fallback is also reported at once, as
// the download goes on.
func (u *updater) patchOptions(f *link.Update, opt *update.Options) (note func() string) {
	var mu sync.Mutex
	last := ""
	note = func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Replace(last, "; fetching the full binary", "; fetched the full binary", 1)
	}
	if f.PatchManifest == "" {
		return note
	}
	fail := func(why string) {
		mu.Lock()
		last = "patch failed: " + why + "; fetching the full binary"
		mu.Unlock()
	}
	pm, err := release.ParsePatchManifest([]byte(f.PatchManifest))
	if err != nil {
		fail(err.Error())
		return note
	}
	src, err := u.client.ResolveURL(f.PatchURL)
	if err != nil {
		fail(err.Error())
		return note
	}
	exe, err := os.Executable()
	if err != nil {
		fail("the running binary: " + err.Error())
		return note
	}
	opt.Patch, opt.PatchURL, opt.PatchFrom = pm, src, exe
	opt.Note = func(s string) {
		mu.Lock()
		last = s
		mu.Unlock()
		if strings.HasPrefix(s, "patch failed") {
			u.report(&link.UpdateStatus{UpdateID: f.UpdateID, Version: f.Version, State: link.UpdateDownloading, Reason: s})
		}
	}
	return note
}

// binarySHA256 is the running binary's SHA-256 for connect (hashed once,
// then kept in the state dir by path, size and time); "" when unknown.
func binarySHA256(stateDir string, log *slog.Logger) string {
	exe, err := os.Executable()
	if err == nil {
		var sum string
		if sum, err = update.BinarySHA256(exe, stateDir); err == nil {
			return sum
		}
	}
	log.Warn("the running binary's sha256 is unknown: rollouts send it whole binaries, no patches", "err", err)
	return ""
}
