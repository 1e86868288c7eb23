package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// natsModule is the nats-server module the binary is built from; its
// version is the one go.mod pins (natsVersion reads it from the build).
const natsModule = "github.com/nats-io/nats-server/v2"

// natsConfig is a node's config file in nats-server's format. A single
// node has no cluster block: alone, a clustered node waits for routes
// and never elects a JetStream meta leader.
func (n *NATSNode) natsConfig() string {
	syncLine := ""
	if n.syncAlways {
		syncLine = "  sync_interval: always\n"
	}
	conf := fmt.Sprintf("server_name: %s\nlisten: \"%s:%d\"\nhttp: \"%s:%d\"\njetstream {\n  store_dir: %s\n%s}\n",
		n.Name, n.Host, n.ClientPort, n.Host, n.MonitorPort, strconv.Quote(n.StoreDir), syncLine)
	if len(n.routes) < 2 {
		return conf
	}
	var routes []string
	for _, r := range n.routes {
		routes = append(routes, strconv.Quote(r))
	}
	// no_advertise: a client knows the URLs it was given and no others,
	// so a node given one URL (through a proxy that cuts it off) stays
	// behind it: termserver moves its connection to another NATS server
	// when its own stops answering (cluster.EdgeWatch), and would
	// otherwise find the others by the cluster's gossip.
	return conf + fmt.Sprintf("cluster {\n  name: %s\n  listen: \"%s:%d\"\n  routes: [%s]\n  no_advertise: true\n}\n",
		n.clusterName, n.Host, n.ClusterPort, strings.Join(routes, ", "))
}

// procRun is a nats-server process.
type procRun struct{ p *proc }

func (r procRun) stop(ctx context.Context) error { return r.p.stop(ctx) }
func (r procRun) kill()                          { r.p.kill() }
func (r procRun) exited() bool                   { return r.p.exited() }

func (n *NATSNode) startProcess(ctx context.Context) (natsRun, error) {
	if err := os.WriteFile(n.confFile, []byte(n.natsConfig()), 0o644); err != nil {
		return nil, fmt.Errorf("nats %s: writing config: %w", n.Name, err)
	}
	p, err := startProc(n.LogFile, nil, inNetns(n.Netns, n.binary, "-c", n.confFile)...)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", n.Name, err)
	}
	r := procRun{p}
	if err := n.waitListening(ctx, r); err != nil {
		p.kill()
		return nil, err
	}
	return r, nil
}

// natsVersion is the version of the nats-server module go.mod pins
// (go list -m, run from inside the termlink module).
func natsVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", natsModule).CombinedOutput()
	v := strings.TrimSpace(string(out))
	if err != nil || v == "" {
		return "", fmt.Errorf("go list -m %s (run from inside the termlink module): %v %s", natsModule, err, out)
	}
	return v, nil
}

var buildMu sync.Mutex

// BuildNATSServer builds the nats-server binary from the module go.mod
// pins (go build, run from inside the termlink module) into
// cacheDir/natsnode-VERSION/natsnode, or returns the one built there
// before. The name is not "nats-server" on purpose: someone's
// `killall nats-server` or `pkill -f nats-server` (seen on a shared
// machine, restarting a hand-made cluster) must not take the nodes of a
// running test down. cacheDir empty: the user cache directory. The build goes
// to a temporary name and is renamed into place, so test binaries that
// build at the same time do not see half a file.
func BuildNATSServer(ctx context.Context, cacheDir string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	v, err := natsVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("building nats-server: %w", err)
	}
	if cacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("building nats-server: no cache directory: %w", err)
		}
		cacheDir = filepath.Join(d, "termlink")
	}
	dir := filepath.Join(cacheDir, "natsnode-"+v)
	bin := filepath.Join(dir, "natsnode")
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("building nats-server: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "natsnode-*.tmp")
	if err != nil {
		return "", fmt.Errorf("building nats-server: %w", err)
	}
	_ = tmp.Close()
	defer os.Remove(tmp.Name())
	// On copies of termlink's go.mod and go.sum, with -mod=mod: the
	// nats-server command needs a module the termlink packages do not
	// (go.uber.org/automaxprocs), whose go.sum lines `go mod tidy`
	// removes, so a plain go build fails on a machine that never built
	// it ("missing go.sum entry"). The copies get the lines; the
	// repository's files are not touched.
	modfile, cleanup, err := natsModfile(ctx)
	if err != nil {
		return "", fmt.Errorf("building nats-server: %w", err)
	}
	defer cleanup()
	cmd := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-modfile="+modfile, "-o", tmp.Name(), natsModule)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building nats-server (go build %s, from inside the termlink module): %w\n%s", natsModule, err, out)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("building nats-server: %w", err)
	}
	return bin, nil
}

// natsModfile copies termlink's go.mod and go.sum to a temporary
// directory and returns the copy of go.mod (for go build -modfile).
func natsModfile(ctx context.Context) (string, func(), error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", nil, errors.New("not inside the termlink module (go env GOMOD is empty)")
	}
	dir, err := os.MkdirTemp("", "natsnode-mod-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	for _, f := range [][2]string{{gomod, "nats.mod"}, {strings.TrimSuffix(gomod, ".mod") + ".sum", "nats.sum"}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			cleanup()
			return "", nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, f[1]), b, 0o644); err != nil {
			cleanup()
			return "", nil, err
		}
	}
	return filepath.Join(dir, "nats.mod"), cleanup, nil
}
