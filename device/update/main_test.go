package update

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"termlink/release"
	"termlink/testrig/childtest"
)

// binDir holds the binaries the tests build, once per test run.
var (
	binDir  string
	binMu   sync.Mutex
	binsOut = map[string]*builtBin{}
)

// builtBin is one build: done once, by the first test that needs it;
// tests needing other binaries build them at the same time.
type builtBin struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "update-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// nativeExec skips a test that starts the programs it built (or itself)
// when the test runs under an emulator (make test-arm): the binaries are
// built for the test's architecture and qemu-user does not follow an
// execve, nor do the supervisor's children. The ARM build is covered by
// TestSuperviseARMv6, which runs the ARM binaries under qemu-arm-static
// from a native test run.
func nativeExec(t *testing.T) {
	t.Helper()
	if emu := childtest.Emulator(); emu != "" {
		t.Skipf("starts the binaries it builds: not under the emulator %s (TestSuperviseARMv6 covers ARM from a native run)", emu)
	}
}

// build builds the package pkg (relative to this one) with main.version
// set to version ("" none), once. The binaries are linked without the
// symbol table and DWARF (-s -w): quicker to link, and nothing here
// debugs them.
func build(t testing.TB, pkg, version string, env ...string) string {
	t.Helper()
	key := pkg + "@" + version + strings.Join(env, ",")
	binMu.Lock()
	b, ok := binsOut[key]
	if !ok {
		b = &builtBin{path: filepath.Join(binDir, filepath.Base(pkg)+"-"+version+"-"+strconv.Itoa(len(binsOut)))}
		binsOut[key] = b
	}
	binMu.Unlock()
	b.once.Do(func() {
		ldflags := "-s -w"
		if version != "" {
			ldflags += " -X main.version=" + version
		}
		cmd := exec.Command("go", "build", "-o", b.path, "-ldflags", ldflags, pkg)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// workerBin is the test program at version; brokenBin exits at start.
func workerBin(t testing.TB, version string) string {
	return build(t, "./testdata/worker", version)
}
func brokenBin(t testing.TB) string { return build(t, "./testdata/exitatstart", "") }

// newKey makes a release key pair.
func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey, string) {
	t.Helper()
	dir := t.TempDir()
	pub, err := release.GenerateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := release.LoadPrivateKey(filepath.Join(dir, release.PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv, filepath.Join(dir, release.PublicKeyFile)
}

// sign signs the file at path as version for this platform.
func sign(t testing.TB, priv ed25519.PrivateKey, version, path string) *release.Manifest {
	t.Helper()
	m, err := release.Sign(priv, version, release.CurrentPlatform(), path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fileServer serves files by name with http.ServeContent (Range
// requests too). cutAt > 0 makes the next response stop after that many
// bytes of body (the connection closed), once.
type fileServer struct {
	*httptest.Server
	files   sync.Map // name -> path
	cutAt   atomic.Int64
	mu      sync.Mutex
	seen    []string
	hits    atomic.Int64
	token   string
	tokenOK atomic.Int64
}

func newFileServer(t testing.TB) *fileServer {
	fs := &fileServer{}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs.hits.Add(1)
		fs.mu.Lock()
		fs.seen = append(fs.seen, r.Header.Get("Range"))
		fs.mu.Unlock()
		if fs.token != "" && r.Header.Get("Authorization") == "Bearer "+fs.token {
			fs.tokenOK.Add(1)
		}
		p, ok := fs.files.Load(strings.TrimPrefix(r.URL.Path, "/"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(p.(string))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		if cut := fs.cutAt.Swap(0); cut > 0 {
			st, _ := f.Stat()
			w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
			w.WriteHeader(http.StatusOK)
			io.CopyN(w, f, cut)
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		http.ServeContent(w, r, "termd", time.Time{}, f)
	}))
	t.Cleanup(fs.Close)
	return fs
}

func (fs *fileServer) serve(name, path string) string {
	fs.files.Store(name, path)
	return fs.URL + "/" + name
}

func (fs *fileServer) rangesSeen() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]string(nil), fs.seen...)
}
