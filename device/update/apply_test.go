package update

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"termlink/release"
)

// fixture is an installed binary and a worker whose supervisor is the
// test: lines the worker sends arrive on msgs.
type fixture struct {
	dir, exe, state string
	w               *Worker
	msgs            chan string
	before          []byte // the installed binary
}

func newFixture(t *testing.T, installed string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, exe: filepath.Join(dir, "termd"), state: filepath.Join(dir, "state"), msgs: make(chan string, 8)}
	if err := CopyFile(installed, f.exe); err != nil {
		t.Fatal(err)
	}
	f.before, _ = os.ReadFile(f.exe)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	f.w = &Worker{Exe: f.exe, StateDir: f.state, pipe: pw}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			f.msgs <- sc.Text()
		}
	}()
	t.Cleanup(func() { pw.Close(); <-done; pr.Close() })
	return f
}

// untouched fails the test unless the installed binary is as it was and
// nothing is staged or said.
func (f *fixture) untouched(t *testing.T) {
	t.Helper()
	if b, _ := os.ReadFile(f.exe); !bytes.Equal(b, f.before) {
		t.Error("the installed binary changed")
	}
	if _, err := os.Stat(f.exe + StagedSuffix); err == nil {
		t.Error("a release is staged")
	}
	select {
	case m := <-f.msgs:
		t.Errorf("the supervisor was told %q", m)
	default:
	}
}

// A release newer than the running one, signed by the pinned key, is
// downloaded (with the token), checked, staged executable beside the
// installed binary with its manifest, and the supervisor is told; the
// installed binary is not touched.
func TestApplyStages(t *testing.T) {
	t.Parallel()
	pub, priv, _ := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	f := newFixture(t, v1)
	srv := newFileServer(t)
	srv.token = "tok-1"
	m := sign(t, priv, "v1.1.0", v2)
	err := Apply(context.Background(), Options{URL: srv.serve("v2", v2), Token: "tok-1", Manifest: m, Key: pub,
		Version: "v1.0.0", Worker: f.w, Gate: 7 * time.Second, UpdateID: "r-3.2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-f.msgs; got != "update 7" {
		t.Errorf("the supervisor was told %q, want \"update 7\"", got)
	}
	if req, err := ReadRequest(f.w.StateDir); err != nil || req.IDFor("v1.1.0") != "r-3.2" {
		t.Errorf("the request recorded: %+v (%v), want v1.1.0's update_id r-3.2", req, err)
	}
	fi, err := os.Stat(f.exe + StagedSuffix)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("staged: %v %v, want mode 0755", fi, err)
	}
	want, _ := os.ReadFile(v2)
	if got, _ := os.ReadFile(f.exe + StagedSuffix); !bytes.Equal(got, want) {
		t.Error("the staged binary is not v2")
	}
	if b, err := os.ReadFile(f.exe + StagedSuffix + release.ManifestSuffix); err != nil || !bytes.Equal(b, m.Marshal()) {
		t.Errorf("staged manifest: %v", err)
	}
	if b, _ := os.ReadFile(f.exe); !bytes.Equal(b, f.before) {
		t.Error("the installed binary changed")
	}
	if srv.tokenOK.Load() != 1 {
		t.Error("the token was not sent")
	}
	if parts, _ := filepath.Glob(f.exe + "*.part"); len(parts) != 0 {
		t.Errorf("partial files left: %v", parts)
	}
}

// Every refusal says why, specifically, and leaves the installed binary
// as it was; those decided by the manifest download nothing.
func TestApplyRefuses(t *testing.T) {
	t.Parallel()
	pub, priv, _ := newKey(t)
	_, otherPriv, _ := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	srv := newFileServer(t)
	url := srv.serve("v2", v2)
	wrongPlatform, err := release.Sign(priv, "v1.1.0", "plan9/mips", v2)
	if err != nil {
		t.Fatal(err)
	}
	tampered := *sign(t, priv, "v1.1.0", v2)
	tampered.Version = "v9.0.0"
	for _, tt := range []struct {
		name    string
		m       *release.Manifest
		running string
		want    error
		text    string
	}{
		{"bad signature", sign(t, otherPriv, "v1.1.0", v2), "v1.0.0", ErrBadSignature, "does not match the release key"},
		{"tampered manifest", &tampered, "v1.0.0", ErrBadSignature, "v9.0.0"},
		{"wrong platform", wrongPlatform, "v1.0.0", ErrWrongPlatform, "plan9/mips, this is " + release.CurrentPlatform()},
		{"downgrade", sign(t, priv, "v0.9.0", v2), "v1.0.0", ErrDowngrade, "v0.9.0, running v1.0.0"},
		{"same version", sign(t, priv, "v1.0.0", v2), "v1.0.0", ErrDowngrade, "v1.0.0, running v1.0.0"},
		{"running an unordered version", sign(t, priv, "v1.1.0", v2), "devel-abc123", ErrDowngrade, "not ordered"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, v1)
			hits := srv.hits.Load()
			err := Apply(context.Background(), Options{URL: url, Manifest: tt.m, Key: pub, Version: tt.running, Worker: f.w})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %v, want %v with %q", err, tt.want, tt.text)
			}
			if srv.hits.Load() != hits {
				t.Error("the binary was downloaded")
			}
			f.untouched(t)
		})
	}
	t.Run("downgrade allowed", func(t *testing.T) {
		f := newFixture(t, v1)
		m := sign(t, priv, "v0.9.0", v2)
		if err := Apply(context.Background(), Options{URL: url, Manifest: m, Key: pub, Version: "v1.0.0", AllowDowngrade: true, Worker: f.w}); err != nil {
			t.Fatal(err)
		}
		if got := <-f.msgs; got != "update" {
			t.Errorf("told %q", got)
		}
	})
	t.Run("no supervisor", func(t *testing.T) {
		err := Apply(context.Background(), Options{URL: url, Manifest: sign(t, priv, "v1.1.0", v2), Key: pub, Version: "v1.0.0"})
		if !errors.Is(err, ErrNoSupervisor) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("another Apply under way", func(t *testing.T) {
		f := newFixture(t, v1)
		f.w.applying.Lock()
		defer f.w.applying.Unlock()
		err := Apply(context.Background(), Options{URL: url, Manifest: sign(t, priv, "v1.1.0", v2), Key: pub, Version: "v1.0.0", Worker: f.w})
		if !errors.Is(err, ErrBusy) {
			t.Errorf("err = %v", err)
		}
		f.untouched(t)
	})
	t.Run("a release on trial", func(t *testing.T) {
		f := newFixture(t, v1)
		st := &Status{Pending: &Pending{Version: "v1.0.5", SHA256: sum, Size: 1, GateSeconds: 60}}
		if err := writeStatus(f.state, st); err != nil {
			t.Fatal(err)
		}
		err := Apply(context.Background(), Options{URL: url, Manifest: sign(t, priv, "v1.1.0", v2), Key: pub, Version: "v1.0.0", Worker: f.w})
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "v1.0.5 is on trial") {
			t.Errorf("err = %v", err)
		}
		f.untouched(t)
	})
	t.Run("no key", func(t *testing.T) {
		f := newFixture(t, v1)
		err := Apply(context.Background(), Options{URL: url, Manifest: sign(t, priv, "v1.1.0", v2), Version: "v1.0.0", Worker: f.w})
		if !errors.Is(err, ErrNoKey) {
			t.Errorf("err = %v", err)
		}
		f.untouched(t)
	})
}

// A download cut short keeps what it got (ErrTruncated, nothing staged);
// the next Apply asks for the rest with a Range request and stages it.
func TestApplyResumes(t *testing.T) {
	t.Parallel()
	pub, priv, _ := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	f := newFixture(t, v1)
	srv := newFileServer(t)
	url := srv.serve("v2", v2)
	m := sign(t, priv, "v1.1.0", v2)
	half := m.Size / 2
	srv.cutAt.Store(half)
	o := Options{URL: url, Manifest: m, Key: pub, Version: "v1.0.0", Worker: f.w}
	err := Apply(context.Background(), o)
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("err = %v, want ErrTruncated", err)
	}
	f.untouched(t)
	parts, _ := filepath.Glob(f.exe + StagedSuffix + "-*.part")
	if len(parts) != 1 {
		t.Fatalf("partial files: %v", parts)
	}
	if fi, _ := os.Stat(parts[0]); fi.Size() != half || fi.Mode().Perm()&0o111 != 0 {
		t.Fatalf("partial file: %d bytes mode %v, want %d bytes not executable", fi.Size(), fi.Mode(), half)
	}
	if err := Apply(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if got := <-f.msgs; got != "update" {
		t.Errorf("told %q", got)
	}
	seen := srv.rangesSeen()
	if want := "bytes=" + itoa(half) + "-"; len(seen) != 2 || seen[0] != "" || seen[1] != want {
		t.Errorf("Range headers %q, want [\"\" %q]", seen, want)
	}
	want, _ := os.ReadFile(v2)
	if got, _ := os.ReadFile(f.exe + StagedSuffix); !bytes.Equal(got, want) {
		t.Error("the staged binary is not v2")
	}
}

// A server whose file is not the manifest's: more bytes than the
// manifest says are never read; the same size with other content is
// refused by its SHA-256 and the partial file deleted.
func TestApplyWrongContent(t *testing.T) {
	t.Parallel()
	pub, priv, _ := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	m := sign(t, priv, "v1.1.0", v2)
	body, _ := os.ReadFile(v2)
	bigger := filepath.Join(t.TempDir(), "bigger")
	os.WriteFile(bigger, append(append([]byte(nil), body...), make([]byte, 1<<20)...), 0o644)
	other := filepath.Join(t.TempDir(), "other")
	flipped := append([]byte(nil), body...)
	flipped[len(flipped)/2] ^= 0xff
	os.WriteFile(other, flipped, 0o644)
	srv := newFileServer(t)
	for _, tt := range []struct {
		name, file string
		want       error
	}{{"more bytes", bigger, ErrTooLarge}, {"other bytes", other, ErrChecksum}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, v1)
			err := Apply(context.Background(), Options{URL: srv.serve(tt.name, tt.file), Manifest: m, Key: pub, Version: "v1.0.0", Worker: f.w})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			f.untouched(t)
			if parts, _ := filepath.Glob(f.exe + "*.part"); len(parts) != 0 && tt.want == ErrChecksum {
				t.Errorf("partial file kept: %v", parts)
			}
		})
	}
}

// A full disk (the partial file on /dev/full: every write ENOSPC) is
// ErrDiskFull, and the installed binary stays.
func TestApplyDiskFull(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	pub, priv, _ := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	f := newFixture(t, v1)
	srv := newFileServer(t)
	m := sign(t, priv, "v1.1.0", v2)
	part := f.exe + StagedSuffix + "-" + m.SHA256[:16] + ".part"
	if err := os.Symlink("/dev/full", part); err != nil {
		t.Fatal(err)
	}
	err := Apply(context.Background(), Options{URL: srv.serve("v2", v2), Manifest: m, Key: pub, Version: "v1.0.0", Worker: f.w})
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("err = %v, want ErrDiskFull", err)
	}
	f.untouched(t)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
