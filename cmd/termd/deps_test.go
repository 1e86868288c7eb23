package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"termlink/testrig/needtool"
)

// termd runs on a Pi Zero and downloads itself on every release: it links
// what a device needs and nothing of the server's side. notInTermd says
// which packages it must not link and why (issue 43, a smaller termd).
// A package matches a rule when it is the rule's path or below it.
var notInTermd = []struct{ path, why string }{
	{"termlink/server", "the server's side: a device shares code with it through a package both import (termlink/link, termlink/release, internal/...)"},
	{"github.com/nats-io", "the cluster's NATS client and server"},
	{"testing", "the test framework"},
	{"termlink/internal/testwait", "a test helper"},
	{"net/http/pprof", "a profiling server"},
	{"encoding/xml", "nothing termd reads or writes is XML"},
	// periph.io/x/host/v3 itself registers every board periph knows;
	// device/periphhost*.go registers the Raspberry Pi's and Linux's
	// generic drivers instead (about 200 KB of termd for ARMv6).
	{"periph.io/x/host/v3", "periph's every-board driver set: import the drivers termd needs (device/periphhost*.go)"},
	// termd speaks HTTP/1.1 only (its WebSocket upgrade, its release
	// downloads) and is built with -tags nethttpomithttp2 (make pi,
	// termdTags): net/http then leaves its bundled HTTP/2 out (about
	// 260 KB of termd for ARMv6). Its HPACK package is the sign it is in.
	// termd's --server auto browses with link/discover's own small mDNS
	// client; the advertiser's library stays termserver's (about 500 KB
	// of termd for ARMv6 with the DNS library and x/net's ipv4/ipv6).
	{"github.com/hashicorp/mdns", "termserver's mDNS advertiser library: termd browses with link/discover's own client"},
	{"github.com/miekg/dns", "a whole DNS library: link/discover reads the few records a browse needs (dnsmsg.go)"},
	{"vendor/golang.org/x/net/http2", "net/http's bundled HTTP/2: build termd with -tags " + termdTags},
}

// termdTags are the build tags termd ships with (Makefile TERMD_TAGS).
const termdTags = "nethttpomithttp2"

// periphHostAllowed are the periph.io/x/host/v3 packages termd may link
// (below the periph.io/x/host/v3 rule): Linux's generic drivers, the
// Raspberry Pi's and what they import.
var periphHostAllowed = []string{"gpioioctl", "netlink", "sysfs", "fs", "bcm283x", "rpi", "cpu", "distro", "pmem", "videocore"}

// forbidden says why path must not be in termd, or "" when it may.
func forbidden(path string) string {
	for _, r := range notInTermd {
		if path != r.path && !strings.HasPrefix(path, r.path+"/") {
			continue
		}
		if r.path == "periph.io/x/host/v3" && slices.Contains(periphHostAllowed, strings.TrimPrefix(path, r.path+"/")) {
			return ""
		}
		return r.why
	}
	return ""
}

// importGraph parses go list -deps -f '{{.ImportPath}} {{join .Imports " "}}'.
func importGraph(out []byte) map[string][]string {
	g := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	return g
}

// importChain is the shortest chain of imports from root to pkg in g
// ("a -> b -> pkg"), or "" when root does not reach pkg.
func importChain(g map[string][]string, root, pkg string) string {
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == pkg {
			chain := []string{p}
			for p != root {
				p = from[p]
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return strings.Join(chain, " -> ")
		}
		for _, q := range g[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return ""
}

// linkViolations lists each package root links in g that it must not,
// with the import chain that brings it in and why it must not.
func linkViolations(g map[string][]string, root string) []string {
	var bad []string
	for p := range g {
		if why := forbidden(p); why != "" {
			bad = append(bad, fmt.Sprintf("%s\n\t\tvia %s\n\t\tnot in termd: %s", p, importChain(g, root, p), why))
		}
	}
	slices.Sort(bad)
	return bad
}

// TestTermdLinksNoServerSide lists what termd links when built for the
// Pi (ARMv6 and arm64, as make pi builds it, with termdTags) and for
// this machine, and
// fails on each package of notInTermd, naming the chain of imports that
// brings it in.
func TestTermdLinksNoServerSide(t *testing.T) {
	gotool := needtool.Path(t, "go", "go list -deps tells what termd links")
	for _, target := range []struct{ name, goos, goarch, goarm string }{
		{"linux/arm/6", "linux", "arm", "6"},
		{"linux/arm64", "linux", "arm64", ""},
		{"this machine", "", "", ""},
	} {
		t.Run(strings.ReplaceAll(target.name, "/", "-"), func(t *testing.T) {
			cmd := exec.Command(gotool, "list", "-tags", termdTags, "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, ".")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if target.goos != "" {
				cmd.Env = append(cmd.Env, "GOOS="+target.goos, "GOARCH="+target.goarch, "GOARM="+target.goarm)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps (%s): %v\n%s", target.name, err, stderr.Bytes())
			}
			g := importGraph(out)
			if _, ok := g["termlink/cmd/termd"]; !ok {
				t.Fatalf("go list -deps (%s) did not list termlink/cmd/termd:\n%s", target.name, out)
			}
			if bad := linkViolations(g, "termlink/cmd/termd"); len(bad) > 0 {
				t.Errorf("termd for %s links %d package(s) it must not:\n\t%s", target.name, len(bad), strings.Join(bad, "\n\t"))
			}
		})
	}
}

// The check fails on a graph that links what termd must not, naming the
// chain: here a server package through a shared one, a non-Pi periph
// driver through the periph umbrella package.
func TestLinkViolationsNameTheChain(t *testing.T) {
	g := importGraph([]byte(`termlink/cmd/termd termlink/device/termd fmt
termlink/device/termd termlink/link termlink/device
termlink/link termlink/server/registry fmt
termlink/server/registry fmt
termlink/device periph.io/x/host/v3 periph.io/x/host/v3/rpi
periph.io/x/host/v3 periph.io/x/host/v3/allwinner periph.io/x/host/v3/rpi
periph.io/x/host/v3/allwinner
periph.io/x/host/v3/rpi
fmt
`))
	bad := linkViolations(g, "termlink/cmd/termd")
	want := []string{
		"periph.io/x/host/v3\n\t\tvia termlink/cmd/termd -> termlink/device/termd -> termlink/device -> periph.io/x/host/v3",
		"periph.io/x/host/v3/allwinner\n\t\tvia termlink/cmd/termd -> termlink/device/termd -> termlink/device -> periph.io/x/host/v3 -> periph.io/x/host/v3/allwinner",
		"termlink/server/registry\n\t\tvia termlink/cmd/termd -> termlink/device/termd -> termlink/link -> termlink/server/registry",
	}
	if len(bad) != len(want) {
		t.Fatalf("violations:\n%s\nwant %d", strings.Join(bad, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(bad[i], want[i]+"\n\t\tnot in termd: ") {
			t.Errorf("violation %d:\n%s\nwant it to start\n%s", i, bad[i], want[i])
		}
	}
	// What termd may link is no violation.
	for _, p := range []string{"termlink/link", "periph.io/x/host/v3/rpi", "periph.io/x/host/v3/sysfs", "termlink/serverless", "fmt"} {
		if why := forbidden(p); why != "" {
			t.Errorf("forbidden(%q) = %q, want it allowed", p, why)
		}
	}
}
