package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/internal/testpki"
	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/metrics"
)

// pki is a CA and a server certificate for 127.0.0.1.
type pki struct {
	ca   *testpki.CA
	leaf *testpki.Leaf
}

func newPKI(t *testing.T) *pki {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	return &pki{ca: ca, leaf: ca.Server(t, "server")}
}

func (p *pki) config(ws string) *config.Config {
	cfg := config.Default()
	cfg.Workspace = ws
	cfg.TLS = config.TLS{CertFile: p.leaf.CertFile, KeyFile: p.leaf.KeyFile}
	return cfg
}

// logTo is a logger whose lines a test reads from b.
func logTo(b *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// serveTLS serves tc's config on a loopback port: each connection is
// handshaken, answered with one byte (so the client reads the ticket
// sent before it) and closed; its DidResume goes to the channel.
func serveTLS(t *testing.T, tc *TLS) (addr string, resumed <-chan bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan bool, 16)
	tln := tls.NewListener(ln, tc.conf)
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				conn := c.(*tls.Conn)
				if err := conn.Handshake(); err != nil {
					t.Errorf("server handshake: %v", err)
					ch <- false
					return
				}
				ch <- conn.ConnectionState().DidResume
				_, _ = conn.Write([]byte("x"))
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// client is a device's TLS: the lab CA and a session cache kept across
// dials, as link.Client keeps it.
func (p *pki) client(maxVersion uint16) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MaxVersion: maxVersion,
		ClientSessionCache: tls.NewLRUClientSessionCache(4)}
}

// dial connects once with conf, reads the server's byte (and the ticket
// before it) and says whether the client resumed; the server's view must
// agree.
func dial(t *testing.T, addr string, serverResumed <-chan bool, conf *tls.Config) bool {
	t.Helper()
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("read: %v", err)
	}
	did := c.ConnectionState().DidResume
	if s := <-serverResumed; s != did {
		t.Fatalf("client DidResume %v, server %v", did, s)
	}
	return did
}

func mustLoad(t *testing.T, cfg *config.Config, log *slog.Logger, now func() time.Time) *TLS {
	t.Helper()
	tc, err := load(cfg, log, now)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return tc
}

// A device that reconnects to a restarted server (a new Load on the same
// workspace, a new listener) resumes its TLS 1.3 session: the keys are
// the workspace's. A server on another workspace (other keys, as every
// restart had before the keys were kept) does not resume it; neither
// does a restarted server resume a TLS 1.2 session, whose ticket keys
// stay in memory (within one server's life it does). The handshakes are
// counted by resumed.
func TestResumeAcrossRestart(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	ws := t.TempDir()
	first := mustLoad(t, p.config(ws), nil, time.Now)
	var reg metrics.Registry
	first.Metrics(&reg)
	addr, resumed := serveTLS(t, first)
	dev := p.client(0)
	if dial(t, addr, resumed, dev) {
		t.Fatal("the first connection resumed a session")
	}
	if fi, err := os.Stat(filepath.Join(ws, TicketKeysFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 0600", fi, err)
	}
	if !dial(t, addr, resumed, dev) {
		t.Fatal("the second connection to the same server did not resume")
	}
	var text strings.Builder
	reg.WriteText(&text)
	for _, want := range []string{`termlink_tls_handshakes_total{resumed="false"} 1`, `termlink_tls_handshakes_total{resumed="true"} 1`} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, text.String())
		}
	}

	restarted := mustLoad(t, p.config(ws), nil, time.Now)
	addr2, resumed2 := serveTLS(t, restarted)
	if !dial(t, addr2, resumed2, dev) {
		t.Fatal("after the restart on the same workspace the device did not resume its session")
	}

	other := mustLoad(t, p.config(t.TempDir()), nil, time.Now)
	addr3, resumed3 := serveTLS(t, other)
	if dial(t, addr3, resumed3, dev) {
		t.Fatal("a server with other keys resumed the session")
	}

	t.Run("TLS 1.2", func(t *testing.T) {
		old := p.client(tls.VersionTLS12)
		a, r := serveTLS(t, mustLoad(t, p.config(ws), nil, time.Now))
		if dial(t, a, r, old) || !dial(t, a, r, old) {
			t.Fatal("TLS 1.2: want a full handshake, then a resumption on the same server")
		}
		a2, r2 := serveTLS(t, mustLoad(t, p.config(ws), nil, time.Now))
		if dial(t, a2, r2, old) {
			t.Fatal("TLS 1.2: a restarted server resumed the session: its ticket was made with the workspace's keys")
		}
	})
}

// A key file that does not load is named in the log with the reason and
// replaced by fresh keys; the server starts and serves, and its new
// tickets resume.
func TestTicketKeysBadFile(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	good := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, content, want string
	}{
		{"garbage", "\x00\x01not keys at all", "first line"},
		{"empty", "", "first line"},
		{"no key", ticketKeysHeader + "\n", "no key in the file"},
		{"short key", ticketKeysHeader + "\n1700000000 " + strings.Repeat("ab", 31) + "\n", "line 2: the key is 31 bytes, want 32"},
		{"long key", ticketKeysHeader + "\n1700000000 " + good + "\n1700000000 " + good + "cd\n", "line 3: the key is 33 bytes, want 32"},
		{"not hex", ticketKeysHeader + "\n1700000000 " + strings.Repeat("zz", 32) + "\n", "line 2: the key is not hex"},
		{"no date", ticketKeysHeader + "\n" + good + "\n", "line 2: want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			path := filepath.Join(ws, TicketKeysFile)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var log syncbuf.Buffer
			tc2 := mustLoad(t, p.config(ws), logTo(&log), time.Now)
			out := log.String()
			if !strings.Contains(out, "TLS session ticket keys not loaded") || !strings.Contains(out, path) || !strings.Contains(out, tc.want) {
				t.Fatalf("log %q, want the file %s and %q", out, path, tc.want)
			}
			if keys, err := readTicketKeys(path); err != nil || len(keys) != 1 {
				t.Fatalf("the file after load: %d keys, %v; want one fresh key", len(keys), err)
			}
			addr, resumed := serveTLS(t, tc2)
			dev := p.client(0)
			if dial(t, addr, resumed, dev) || !dial(t, addr, resumed, dev) {
				t.Fatal("want a full handshake, then a resumption")
			}
		})
	}
}

// A workspace where the file cannot be read or written (a directory in
// its place; a workspace under a regular file): the log says so and
// names the file, the keys stay in memory and the server resumes within
// its life.
func TestTicketKeysUnwritable(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	dirInPlace := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dirInPlace, TicketKeysFile, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		ws   string
		want []string
	}{
		"directory in place": {dirInPlace, []string{"TLS session ticket keys not loaded", "is a directory", "TLS session ticket keys kept in memory only"}},
		"under a file":       {filepath.Join(file, "ws"), []string{"TLS session ticket keys kept in memory only", "not a directory"}},
	} {
		t.Run(name, func(t *testing.T) {
			var log syncbuf.Buffer
			tc2 := mustLoad(t, p.config(tc.ws), logTo(&log), time.Now)
			out := log.String()
			for _, w := range append(tc.want, filepath.Join(tc.ws, TicketKeysFile)) {
				if !strings.Contains(out, w) {
					t.Errorf("log %q, want %q", out, w)
				}
			}
			addr, resumed := serveTLS(t, tc2)
			dev := p.client(0)
			if dial(t, addr, resumed, dev) || !dial(t, addr, resumed, dev) {
				t.Fatal("want a full handshake, then a resumption (in-memory keys)")
			}
		})
	}
}

// clock is an injected time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Rotation by the injected clock: the newest key encrypts for 24 h,
// then a new one is put first; a key is kept 7 days from its making, so
// a ticket of the first key still resumes on a server restarted 6 days
// later and no longer 7 days later. A key dated in the future (the
// clock stepped back) is replaced at once.
func TestTicketKeyRotation(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	ws := t.TempDir()
	path := filepath.Join(ws, TicketKeysFile)
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	cfg := p.config(ws)
	tc := mustLoad(t, cfg, nil, clk.now)
	addr, resumed := serveTLS(t, tc)
	dev, old := p.client(0), p.client(0)
	dial(t, addr, resumed, dev) // tickets of the first key
	dial(t, addr, resumed, old)
	first := readKeys(t, path)

	clk.add(ticketKeyRotation - time.Second)
	tc.tickets.rotate()
	if got := readKeys(t, path); len(got) != 1 || got[0] != first[0] {
		t.Fatalf("after 24 h less a second: keys %v, want the first one only", got)
	}
	clk.add(time.Second)
	tc.tickets.rotate()
	got := readKeys(t, path)
	if len(got) != 2 || got[1] != first[0] || got[0].created != clk.now() {
		t.Fatalf("after 24 h: keys %v, want a new one before the first", got)
	}
	for day := 2; day <= 6; day++ {
		clk.add(ticketKeyRotation)
		tc.tickets.rotate()
	}
	if got := readKeys(t, path); len(got) != 7 || got[6] != first[0] {
		t.Fatalf("day 6: %d keys, the oldest %v; want 7, the first last", len(got), got[len(got)-1])
	}
	restarted := mustLoad(t, cfg, nil, clk.now) // 6 days on: the first key still decrypts
	a2, r2 := serveTLS(t, restarted)
	if !dial(t, a2, r2, dev) {
		t.Fatal("day 6: a ticket of the first key did not resume")
	}

	clk.add(ticketKeyRotation)
	restarted = mustLoad(t, cfg, nil, clk.now)
	if got := readKeys(t, path); len(got) != 7 || got[6] == first[0] {
		t.Fatalf("day 7: keys %v, want 7 without the first", got)
	}
	a3, r3 := serveTLS(t, restarted)
	if dial(t, a3, r3, old) {
		t.Fatal("day 7: a ticket of a dropped key resumed")
	}

	clk.add(-48 * time.Hour) // stepped back: the newest key is from the future
	tc.tickets.rotate()
	if got := readKeys(t, path); got[0].created != clk.now() {
		t.Fatalf("after the clock stepped back: newest key from %v, want a new one from %v", got[0].created, clk.now())
	}
}

// A handshake after the newest key is due rotates it in the background.
func TestTicketKeyRotationAtHandshake(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	ws := t.TempDir()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	tc := mustLoad(t, p.config(ws), nil, clk.now)
	addr, resumed := serveTLS(t, tc)
	dial(t, addr, resumed, p.client(0))
	if n := len(readKeys(t, filepath.Join(ws, TicketKeysFile))); n != 1 {
		t.Fatalf("%d keys before the key is due, want 1", n)
	}
	clk.add(ticketKeyRotation)
	dial(t, addr, resumed, p.client(0))
	testwait.Until(t, "a second key after a handshake past the rotation time", func() bool {
		keys, err := readTicketKeys(filepath.Join(ws, TicketKeysFile))
		return err == nil && len(keys) == 2
	})
}

type keyView struct {
	created time.Time
	key     [32]byte
}

func readKeys(t *testing.T, path string) []keyView {
	t.Helper()
	keys, err := readTicketKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]keyView, len(keys))
	for i, k := range keys {
		out[i] = keyView{k.created, k.key}
	}
	return out
}

// BenchmarkHandshake is the CPU of one handshake, client and server on
// loopback: full (a fresh client each time) and resumed (a client with a
// session cache, as link.Client keeps) — what a restart's reconnect
// storm costs per device, without the WebSocket.
func BenchmarkHandshake(b *testing.B) {
	dir := b.TempDir()
	ca := testpki.NewCA(b, dir, "lab")
	leaf := ca.Server(b, "server")
	cfg := config.Default()
	cfg.Workspace = b.TempDir()
	cfg.TLS = config.TLS{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile}
	tc, err := load(cfg, slog.New(slog.DiscardHandler), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	// The X25519-only runs show what the hybrid post-quantum key
	// exchange (X25519MLKEM768, Go's default) costs on top: the server's
	// CurvePreferences are the owner's choice and stay Go's default; the
	// client here offers X25519 only.
	for _, tcase := range []struct {
		name           string
		resume, x25519 bool
	}{{"full", false, false}, {"resumed", true, false}, {"full-x25519", false, true}, {"resumed-x25519", true, true}} {
		resume := tcase.resume
		b.Run(tcase.name, func(b *testing.B) {
			client := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: tls.NewLRUClientSessionCache(1)}
			if tcase.x25519 {
				client.CurvePreferences = []tls.CurveID{tls.X25519}
			}
			one := func() bool {
				c, s := net.Pipe()
				done := make(chan error, 1)
				go func() {
					st := tls.Server(s, tc.conf)
					err := st.Handshake()
					if err == nil {
						_, err = st.Write([]byte("x"))
					}
					s.Close()
					done <- err
				}()
				conf := client
				if !resume {
					conf = client.Clone()
					conf.ClientSessionCache = nil
				}
				ct := tls.Client(c, conf)
				if _, err := io.ReadFull(ct, make([]byte, 1)); err != nil {
					b.Fatal(err)
				}
				did := ct.ConnectionState().DidResume
				c.Close()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				return did
			}
			one() // a session to resume
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				if one() != resume {
					b.Fatalf("DidResume %v, want %v", !resume, resume)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") // the process's CPU: a busy machine stretches ns/op, not this
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// FuzzParseTicketKeys: any file text either fails with an error or gives
// keys that encode back to text parsing to the same keys.
func FuzzParseTicketKeys(f *testing.F) {
	k := newTicketKey(time.Unix(1_790_000_000, 0))
	f.Add(encodeTicketKeys([]ticketKey{k, newTicketKey(time.Unix(1_789_900_000, 0))}))
	f.Add([]byte(ticketKeysHeader + "\n"))
	f.Add([]byte(ticketKeysHeader + "\n-1 " + strings.Repeat("ab", 32) + "\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseTicketKeys(b)
		if err != nil {
			if len(keys) != 0 {
				t.Fatalf("error %v with %d keys", err, len(keys))
			}
			return
		}
		again, err := parseTicketKeys(encodeTicketKeys(keys))
		if err != nil || len(again) != len(keys) {
			t.Fatalf("re-encoded: %d keys, %v; want %d", len(again), err, len(keys))
		}
		for i := range keys {
			if again[i].key != keys[i].key || !again[i].created.Equal(keys[i].created) {
				t.Fatalf("key %d changed in the round trip", i)
			}
		}
	})
}
