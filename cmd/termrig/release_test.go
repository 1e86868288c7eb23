package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/release"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/fleetsim"
)

// termrig runs one termrig command in this process.
func termrig(ctx context.Context, args ...string) (status int, stdout, stderr string) {
	var out, errb bytes.Buffer
	status = run(ctx, args, &out, &errb)
	return status, out.String(), errb.String()
}

// The operator's whole path with a real termd binary stamped with its
// version and a real termserver holding the release key and admin
// tokens: keygen, sign, verify, upload (refused without the operator's
// token, and signed by another key), list, a resumed download, delete.
func TestReleaseEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "termd")
	const ver = "1.2.3-test"
	// Without -trimpath (make test sets it in GOFLAGS): its build info
	// then keeps the -X stamp that sign checks.
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "-ldflags", "-X main.version="+ver, "termlink/cmd/termd")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building termd: %v\n%s", err, out)
	}
	plat := release.CurrentPlatform()
	keys := filepath.Join(dir, "keys")

	st, out, errs := termrig(ctx, "release", "keygen", "--out", keys)
	if st != 0 || !strings.Contains(out, "release.key (private, mode 0600): it signs releases and stays on this machine") {
		t.Fatalf("keygen: exit %d\n%s%s", st, out, errs)
	}
	if fi, err := os.Stat(filepath.Join(keys, release.PrivateKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("release.key: %v %v", fi, err)
	}
	if st, _, errs = termrig(ctx, "release", "keygen", "--out", keys); st != 1 || !strings.Contains(errs, "never overwritten") {
		t.Fatalf("second keygen: exit %d %s", st, errs)
	}
	pub := filepath.Join(keys, release.PublicKeyFile)

	const opSecret, viewSecret = "operator-secret-token-0123456789", "viewer-secret-token-0123456789"
	op, _ := config.NewAdminToken(opSecret, config.RoleOperator, "ops")
	view, _ := config.NewAdminToken(viewSecret, config.RoleViewer, "vera")
	srv := servertest.Start(t, func(c *config.Config) {
		c.Admin.Tokens = []config.AdminToken{op, view}
		c.Releases.PublicKeyFile = pub
	})
	server := "http://" + srv.Addr
	opFile, viewFile := filepath.Join(dir, "op token"), filepath.Join(dir, "viewer token")
	_ = os.WriteFile(opFile, []byte(opSecret+"\n"), 0o600)
	_ = os.WriteFile(viewFile, []byte(viewSecret+"\n"), 0o600)

	// Signed as another version than the stamp, or another platform: refused.
	if st, _, errs = termrig(ctx, "release", "sign", "--key", filepath.Join(keys, "release.key"), "--version", "9.9", "--platform", plat, bin); st != 1 ||
		!strings.Contains(errs, "is stamped version "+ver) {
		t.Fatalf("sign as another version: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "release", "sign", "--key", filepath.Join(keys, "release.key"), "--version", ver, "--platform", "plan9/mips", bin); st != 1 ||
		!strings.Contains(errs, "is built for "+plat+", not plan9/mips") {
		t.Fatalf("sign as another platform: exit %d %s", st, errs)
	}
	st, out, errs = termrig(ctx, "release", "sign", "--key", filepath.Join(keys, "release.key"), "--version", ver, "--platform", plat, bin)
	if st != 0 || !strings.Contains(out, "wrote "+bin+".release.json") {
		t.Fatalf("sign: exit %d\n%s%s", st, out, errs)
	}
	if st, out, errs = termrig(ctx, "release", "verify", "--pub", pub, bin); st != 0 || !strings.HasPrefix(out, "OK "+bin+": version "+ver+" for "+plat) {
		t.Fatalf("verify: exit %d\n%s%s", st, out, errs)
	}

	// Upload: no token, then a viewer's, are refused with what to do.
	if st, _, errs = termrig(ctx, "release", "upload", "--server", server, bin); st != 1 || !strings.Contains(errs, "HTTP 401") || !strings.Contains(errs, "pass --admin-token-file") {
		t.Fatalf("upload without a token: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "release", "upload", "--server", server, "--admin-token-file", viewFile, bin); st != 1 ||
		!strings.Contains(errs, "HTTP 403") || !strings.Contains(errs, "needs the operator role") {
		t.Fatalf("upload with a viewer token: exit %d %s", st, errs)
	}
	st, out, errs = termrig(ctx, "release", "upload", bin, "--server", server, "--admin-token-file", opFile)
	if st != 0 || !strings.Contains(out, "stored "+ver+" for "+plat) || !strings.Contains(out, "signature checked by the server") {
		t.Fatalf("upload: exit %d\n%s%s", st, out, errs)
	}
	st, out, errs = termrig(ctx, "release", "list", "--server", server, "--admin-token-file", viewFile)
	if st != 0 || !strings.Contains(out, ver) || !strings.Contains(out, plat) || !strings.Contains(out, "1 of 64 releases") {
		t.Fatalf("list: exit %d\n%s%s", st, out, errs)
	}

	// A binary signed by another key: the server refuses it, and verify
	// against the pinned key fails as a device's check would.
	other := filepath.Join(dir, "other")
	if st, _, errs = termrig(ctx, "release", "keygen", "--out", other); st != 0 {
		t.Fatalf("keygen: %s", errs)
	}
	bin2 := filepath.Join(dir, "termd-other")
	data, _ := os.ReadFile(bin)
	_ = os.WriteFile(bin2, data, 0o755)
	if st, _, errs = termrig(ctx, "release", "sign", "--key", filepath.Join(other, "release.key"), "--version", ver+".1", "--platform", plat, bin2); st != 1 {
		t.Fatalf("sign as another version: exit %d %s", st, errs) // the stamp says ver
	}
	if st, _, errs = termrig(ctx, "release", "sign", "--key", filepath.Join(other, "release.key"), "--version", ver, "--platform", plat, bin2); st != 0 {
		t.Fatalf("sign with the other key: %s", errs)
	}
	if st, _, errs = termrig(ctx, "release", "verify", "--pub", pub, bin2); st != 1 || !strings.Contains(errs, "signature does not match") {
		t.Fatalf("verify of another key's release: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "release", "delete", "--server", server, "--admin-token-file", opFile, "--version", ver, "--platform", plat); st != 0 {
		t.Fatalf("delete: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "release", "upload", "--server", server, "--admin-token-file", opFile, bin2); st != 1 ||
		!strings.Contains(errs, "HTTP 422") || !strings.Contains(errs, "signature does not match the release key") {
		t.Fatalf("upload of another key's release: exit %d %s", st, errs)
	}
	// A binary changed after signing is caught before it is sent.
	data[len(data)/2] ^= 1
	_ = os.WriteFile(bin2, data, 0o755)
	if st, _, errs = termrig(ctx, "release", "verify", "--pub", filepath.Join(other, "release.pub"), bin2); st != 1 || !strings.Contains(errs, "sha256") {
		t.Fatalf("verify of a changed binary: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "release", "upload", "--server", server, "--admin-token-file", opFile, bin2); st != 1 || !strings.Contains(errs, "does not match") {
		t.Fatalf("upload of a changed binary: exit %d %s", st, errs)
	}

	// Uploaded again, it downloads whole and resumed, byte for byte.
	if st, out, errs = termrig(ctx, "release", "upload", "--server", server, "--admin-token-file", opFile, bin); st != 0 {
		t.Fatalf("upload: exit %d %s%s", st, out, errs)
	}
	want, _ := os.ReadFile(bin)
	req, _ := http.NewRequestWithContext(ctx, "GET", server+"/api/releases/"+ver+"/"+plat+"/binary", nil)
	req.Header.Set("Authorization", "Bearer "+viewSecret)
	req.Header.Set("Range", "bytes=1000000-")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusPartialContent || !bytes.Equal(got, want[1000000:]) {
		t.Fatalf("resumed download: HTTP %d, %d bytes (want %d)", res.StatusCode, len(got), len(want)-1000000)
	}
	if st, out, errs = termrig(ctx, "release", "list", "--server", server, "--admin-token-file", viewFile, "--version", "0.0.1"); st != 0 || !strings.Contains(out, "1 of 64 releases") || strings.Contains(out, plat) {
		t.Fatalf("list of another version: exit %d\n%s%s", st, out, errs)
	}
}

// Every mistake in how a release command is called says what is wrong
// (exit status 2).
func TestReleaseUsage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"release"}, "which release command?"},
		{[]string{"release", "publish"}, `unknown release command "publish"`},
		{[]string{"release", "keygen"}, "--out is required"},
		{[]string{"release", "sign", "--version", "1", "--platform", "linux/arm/6", "b"}, "--key is required"},
		{[]string{"release", "sign", "--key", "k", "--platform", "linux/arm/6", "b"}, "--version is required"},
		{[]string{"release", "sign", "--key", "k", "--version", "1", "b"}, "--platform is required"},
		{[]string{"release", "sign", "--key", "k", "--version", "1", "--platform", "linux", "b"}, `platform "linux"`},
		{[]string{"release", "sign", "--key", "k", "--version", "-1", "--platform", "linux/arm64", "b"}, `version "-1"`},
		{[]string{"release", "sign", "--key", "k", "--version", "1", "--platform", "linux/arm64"}, "missing BINARY"},
		{[]string{"release", "verify", "b"}, "--pub is required"},
		{[]string{"release", "upload", "b"}, "--server is required"},
		{[]string{"release", "upload", "--server", "ftp://x", "b"}, "want http://HOST:PORT"},
		{[]string{"release", "upload", "--server", "http://x", "b", "m", "extra"}, `unexpected argument "extra"`},
		{[]string{"release", "list", "--server", "http://x", "stray"}, `unexpected argument "stray"`},
		{[]string{"release", "delete", "--server", "http://x", "--version", "1"}, "--version and --platform are required"},
	} {
		st, _, errs := termrig(ctx, tc.args...)
		if st != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("termrig %s: exit %d, stderr %q, want 2 and %q", strings.Join(tc.args, " "), st, errs, tc.want)
		}
	}
	if st, out, _ := termrig(ctx, "release", "-h"); st != 0 || !strings.Contains(out, "keygen --out DIR") {
		t.Errorf("release -h: exit %d %s", st, out)
	}
	// Files that are not there: exit 1 naming them.
	dir := t.TempDir()
	if st, _, errs := termrig(ctx, "release", "verify", "--pub", filepath.Join(dir, "nope.pub"), "b"); st != 1 || !strings.Contains(errs, "nope.pub") {
		t.Errorf("missing key: exit %d %s", st, errs)
	}
	b := filepath.Join(dir, "b")
	_ = os.WriteFile(b, []byte("not a go binary"), 0o644)
	if st, _, errs := termrig(ctx, "release", "upload", "--server", "http://127.0.0.1:1", b); st != 1 || !strings.Contains(errs, "no manifest (termrig release sign writes it") {
		t.Errorf("missing manifest: exit %d %s", st, errs)
	}
}

// The rollout commands against a real termserver with admin tokens and
// simulated devices on real WebSockets (testrig/fleetsim): a viewer may
// not start one; rollout with canaries; status (the table) until done;
// a failing canary pauses it (status names it); resume --retry; abort.
func TestReleaseRollout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const opSecret, viewSecret = "operator-secret-token-0123456789", "viewer-secret-token-0123456789"
	op, _ := config.NewAdminToken(opSecret, config.RoleOperator, "ops")
	view, _ := config.NewAdminToken(viewSecret, config.RoleViewer, "vera")
	srv := servertest.Start(t, func(c *config.Config) { c.Admin.Tokens = []config.AdminToken{op, view} })
	server := "http://" + srv.Addr
	opFile, viewFile := filepath.Join(dir, "op"), filepath.Join(dir, "viewer")
	_ = os.WriteFile(opFile, []byte(opSecret+"\n"), 0o600)
	_ = os.WriteFile(viewFile, []byte(viewSecret+"\n"), 0o600)
	if _, err := fleetsim.Upload(ctx, server, opSecret, dir, "v2", "linux/arm/6", []byte("termd v2")); err != nil {
		t.Fatal(err)
	}
	fl, err := fleetsim.Start(ctx, fleetsim.Options{URL: srv.URL, N: 4, Version: "v1", Fail: []string{"sim-001"}, FailReason: "crashed at start",
		Tags: map[string]string{"site": "lab"}})
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	st, _, errs := termrig(ctx, "release", "rollout", "--server", server, "--admin-token-file", viewFile, "--version", "v2", "--all")
	if st != 1 || !strings.Contains(errs, "HTTP 403") || !strings.Contains(errs, "needs the operator role") {
		t.Fatalf("rollout with a viewer token: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "release", "rollout", "--server", server, "--admin-token-file", opFile, "--version", "v9", "--all"); st != 1 || !strings.Contains(errs, "HTTP 404 no release v9 is stored") {
		t.Fatalf("rollout of an unknown version: exit %d %s", st, errs)
	}
	// Wait for the four devices to be online, then roll v2 out to the
	// tag, one canary. (It once started a rollout as soon as any device
	// had connected and aborted it for another: under load the canary of
	// an aborted one had installed v2 or reported a rollback before the
	// rollout the test reads began.)
	api, err := newAPIClient(server, viewFile)
	if err != nil {
		t.Fatal(err)
	}
	testwait.UntilOK(t, "the four simulated devices online", func() error {
		var l struct{ Peers []struct{ PeerID string } }
		if err := api.getJSON(ctx, server+"/api/channels/terminal-dev/peers?online=true", "listing peers", &l); err != nil {
			return err
		}
		if len(l.Peers) != 4 {
			return fmt.Errorf("%d online: %v", len(l.Peers), l.Peers)
		}
		return nil
	})
	if st, out, errs := termrig(ctx, "release", "rollout", "--server", server, "--admin-token-file", opFile, "--version", "v2", "--tag", "site=lab", "--canary", "1", "--percent", "50"); st != 0 || !strings.Contains(out, "4 devices") {
		t.Fatalf("rollout: exit %d %s%s", st, out, errs)
	}
	// sim-001 is the canary; it fails: the rollout pauses naming it.
	var out string
	testwait.UntilOK(t, "the rollout paused by sim-001", func() error {
		st, out, errs = termrig(ctx, "release", "status", "--server", server, "--admin-token-file", viewFile, "--version", "v2")
		if st != 0 {
			t.Fatalf("status: exit %d %s", st, errs)
		}
		if !strings.Contains(out, ": paused (sim-001 rolled_back: crashed at start)") {
			return errors.New(out)
		}
		return nil
	})
	if !strings.Contains(out, "DEVICE") || !regexp.MustCompile(`sim-001\s+rolled_back\s+v1\s+canary`).MatchString(out) ||
		!regexp.MustCompile(`sim-002\s+pending\s+v1\s+1`).MatchString(out) {
		t.Fatalf("status table:\n%s", out)
	}
	id := strings.Fields(out)[0]
	if st, _, errs = termrig(ctx, "release", "resume", "--server", server, "--admin-token-file", viewFile, id); st != 1 || !strings.Contains(errs, "HTTP 403") {
		t.Fatalf("resume with a viewer token: exit %d %s", st, errs)
	}
	// Resumed, it runs; the simulated devices install at once, so it may
	// be done by the time the answer is written.
	if st, out, errs = termrig(ctx, "release", "resume", "--server", server, "--admin-token-file", opFile, id); st != 0 ||
		!regexp.MustCompile(regexp.QuoteMeta(id)+` v2: (running|done)`).MatchString(out) {
		t.Fatalf("resume: exit %d %s%s", st, out, errs)
	}
	st, out, errs = termrig(ctx, "release", "status", "--server", server, "--admin-token-file", viewFile, "--watch", "--every", "100ms")
	if st != 0 || !strings.Contains(out, id+" v2: done") || !regexp.MustCompile(`sim-004\s+installed\s+v2\s+2`).MatchString(out) {
		t.Fatalf("status --watch: exit %d\n%s%s", st, out, errs)
	}
	if st, _, errs = termrig(ctx, "release", "abort", "--server", server, "--admin-token-file", opFile, id); st != 1 || !strings.Contains(errs, "HTTP 409") || !strings.Contains(errs, "done already") {
		t.Fatalf("abort of a finished rollout: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "release", "pause", "--server", server, "nope"); st != 2 || !strings.Contains(errs, "not a rollout id") {
		t.Fatalf("pause nope: exit %d %s", st, errs)
	}
}

// A binary built with -trimpath (make pi's) has no -ldflags in its build
// info: sign cannot read its version stamp and says so, instead of
// passing it as checked.
func TestSignTrimpathBuildSaysStampUnchecked(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "-ldflags", "-X main.version=1.0.0", "termlink/testrig/agents/echoagent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	keys := filepath.Join(dir, "keys")
	if st, out, errs := termrig(ctx, "release", "keygen", "--out", keys); st != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", st, out, errs)
	}
	st, out, errs := termrig(ctx, "release", "sign", "--key", filepath.Join(keys, release.PrivateKeyFile), "--version", "9.9", "--platform", release.CurrentPlatform(), bin)
	if st != 0 || !strings.Contains(out, "wrote "+bin+release.ManifestSuffix) {
		t.Fatalf("sign: exit %d\n%s%s", st, out, errs)
	}
	if want := "note: " + bin + " was built with -trimpath, whose build info leaves -ldflags out: its version stamp was not checked against --version 9.9"; !strings.Contains(errs, want) {
		t.Errorf("sign's stderr:\n%s\nwant it to say %q", errs, want)
	}
}

// Issue 43: release delta makes a signed patch of a signed release from
// an older binary (refusing a release not signed with the key), upload
// stores it beside the release (refused before the release), and list
// shows it.
func TestReleaseDeltaUpload(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if _, err := release.GenerateKey(keys); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(keys, release.PrivateKeyFile)
	old := make([]byte, 300<<10)
	rnd := mathrand.New(mathrand.NewPCG(1, 2))
	for i := range old {
		old[i] = byte(rnd.IntN(256))
	}
	nb := append([]byte("a new function\n"), old...)
	oldPath, newPath := filepath.Join(dir, "termd-1.0"), filepath.Join(dir, "termd-1.1")
	_ = os.WriteFile(oldPath, old, 0o755)
	_ = os.WriteFile(newPath, nb, 0o755)
	const plat = "linux/arm/6"
	if st, _, errs := termrig(ctx, "release", "delta", "--from", oldPath, "--to", newPath, "--key", key); st != 1 || !strings.Contains(errs, "no manifest") {
		t.Fatalf("delta of an unsigned release: exit %d %s", st, errs)
	}
	for _, c := range [][]string{{"1.0", oldPath}, {"1.1", newPath}} {
		if st, _, errs := termrig(ctx, "release", "sign", "--key", key, "--version", c[0], "--platform", plat, c[1]); st != 0 {
			t.Fatalf("sign: %s", errs)
		}
	}
	st, out, errs := termrig(ctx, "release", "delta", "--from", oldPath, "--to", newPath, "--key", key)
	if st != 0 || !strings.Contains(out, "patch of 1.1 for "+plat) {
		t.Fatalf("delta: exit %d\n%s%s", st, out, errs)
	}
	patches, _ := filepath.Glob(newPath + ".from-*.patch")
	if len(patches) != 1 {
		t.Fatalf("patches written: %v", patches)
	}
	raw, _ := os.ReadFile(patches[0] + release.PatchManifestSuffix)
	pm, err := release.ParsePatchManifest(raw)
	pub, _ := release.LoadPublicKey(filepath.Join(keys, release.PublicKeyFile))
	if err != nil || pm.Verify(pub) != nil || pm.FromVersion != "1.0" || pm.Size != int64(len(nb)) || pm.PatchSize*10 > int64(len(nb)) {
		t.Fatalf("patch manifest %+v %v", pm, err)
	}
	srv := servertest.Start(t, func(c *config.Config) { c.Releases.PublicKeyFile = filepath.Join(keys, release.PublicKeyFile) })
	server := "http://" + srv.Addr
	if st, _, errs := termrig(ctx, "release", "upload", "--server", server, patches[0]); st != 1 || !strings.Contains(errs, "upload the release before its patches") {
		t.Fatalf("patch before its release: exit %d %s", st, errs)
	}
	if st, _, errs := termrig(ctx, "release", "upload", "--server", server, newPath); st != 0 {
		t.Fatalf("upload: %s", errs)
	}
	if st, out, errs := termrig(ctx, "release", "upload", "--server", server, patches[0]); st != 0 || !strings.Contains(out, "stored a patch of 1.1") {
		t.Fatalf("patch upload: exit %d %s%s", st, out, errs)
	}
	if st, out, errs := termrig(ctx, "release", "list", "--server", server); st != 0 || !strings.Contains(out, "patch from 1.0 ") {
		t.Fatalf("list: exit %d\n%s%s", st, out, errs)
	}
}
