package jepsen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// The network namespaces testrig/bench/jepsen-partition.sh makes (keep
// the two in step; the names differ from cluster-partition.sh's, so both
// can run at once): each node in its own namespace NS, on the bridge
// tljc0 (10.78.0.0/24, the root namespace is 10.78.0.1) through its
// interface c0, whose other end in the root namespace is NS-c; the edges
// also on the bridge tljd0 (10.78.1.0/24, root 10.78.1.1) through d0,
// where the devices (this process) reach them. A partition moves a
// node's NS-c from tljc0 to tljx0, a bridge with no address: the node's
// c0 keeps its carrier and what it sends to the rest is dropped
// silently (this kernel has no tc netem); nodes cut off at the same time
// share tljx0, the minority side. An edge cut off still has its devices
// (d0).
const (
	clusterBridge  = "tljc0"
	devicesBridge  = "tljd0"
	isolatedBridge = "tljx0"
)

// nsNode is one node's namespace and the address it listens on.
type nsNode struct{ ns, host string }

var netnsLayout = map[string]nsNode{
	"n1": {"tlj-n1", "10.78.0.11"}, "n2": {"tlj-n2", "10.78.0.12"}, "n3": {"tlj-n3", "10.78.0.13"},
	"edge-1": {"tlj-e1", "10.78.1.21"}, "edge-2": {"tlj-e2", "10.78.1.22"},
	"worker-1": {"tlj-w1", "10.78.0.31"}, "worker-2": {"tlj-w2", "10.78.0.32"},
}

// run runs argv (bounded by ctx and 10 s) and returns its error with
// its output.
func run(ctx context.Context, argv ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// NetnsReady reports why partitions cannot be drawn here (nil: they
// can): not root, or a namespace or bridge of the layout missing
// (testrig/bench/jepsen-partition.sh makes them).
func NetnsReady(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("not root (ip netns, moving veths between bridges)")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip netns list: %v %s", err, out)
	}
	for _, name := range append(append(append([]string{}, RunTopology.NATS...), RunTopology.Edges...), RunTopology.Workers...) {
		ns := netnsLayout[name].ns
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ns) + `\b`).Match(out) {
			return fmt.Errorf("no network namespace %s (testrig/bench/jepsen-partition.sh makes them)", ns)
		}
	}
	for _, br := range []string{clusterBridge, devicesBridge, isolatedBridge} {
		if err := run(ctx, "ip", "link", "show", "dev", br); err != nil {
			return fmt.Errorf("no bridge %s (testrig/bench/jepsen-partition.sh makes it): %w", br, err)
		}
	}
	return nil
}

// partition cuts node off from the cluster's bridge (onto the minority
// side's) and returns how to put it back.
func partition(ctx context.Context, node string) (func(context.Context) (string, error), error) {
	l, ok := netnsLayout[node]
	if !ok {
		return nil, fmt.Errorf("no namespace for %s", node)
	}
	if err := run(ctx, "ip", "link", "set", "dev", l.ns+"-c", "master", isolatedBridge); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (string, error) {
		return "", run(ctx, "ip", "link", "set", "dev", l.ns+"-c", "master", clusterBridge)
	}, nil
}

// healPartitions puts every node of the layout back on the cluster's
// bridge (after a run, whatever was left cut off).
func healPartitions(ctx context.Context) error {
	var errs []error
	for _, l := range netnsLayout {
		errs = append(errs, run(ctx, "ip", "link", "set", "dev", l.ns+"-c", "master", clusterBridge))
	}
	return errors.Join(errs...)
}

// StoreTmpfsSize is the size of each NATS node's store tmpfs. The
// stream reservations need it: JetStream takes 75% of the free space as
// its file store limit (768 MiB here), and termserver's streams reserve
// about 721 MiB on every node: the devices bucket's 512 MiB, the events
// stream's 64 MiB, the settings bucket's 64 MiB, the history stream's
// historyMaxMegabytes, which the runner lowers to storeHistoryMiB (its
// default, 4 GiB, would not fit), and the releases' object store's
// releases.maxBytes and a little, lowered to storeReleasesBytes (1 GiB
// by default). The notice bucket (256 MiB) is made by the first notice:
// the schedules make none.
const StoreTmpfsSize = "1g"

// storeHistoryMiB is historyMaxMegabytes with the stores on tmpfs.
const storeHistoryMiB = 64

// storeReleasesBytes is releases.maxBytes with the stores on tmpfs.
const storeReleasesBytes = 16 << 20

// DiskFullReady reports why full disks cannot be drawn here (nil: they
// can): not root, or a tmpfs cannot be mounted (it mounts one in dir
// and unmounts it).
func DiskFullReady(dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("not root (mounting the NATS stores' tmpfs)")
	}
	d, err := os.MkdirTemp(dir, "tmpfs-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(d)
	if err := mountTmpfs(d, StoreTmpfsSize); err != nil {
		return err
	}
	return unmount(d)
}

func mountTmpfs(dir, size string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+size+",mode=0755"); err != nil {
		return fmt.Errorf("mount -t tmpfs -o size=%s tmpfs %s: %w", size, dir, err)
	}
	return nil
}

// unmount unmounts dir, lazily if it is busy.
func unmount(dir string) error {
	err := syscall.Unmount(dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("umount %s: %w", dir, err)
	}
	return nil
}

// fillerName is the file a disk_full fault fills a store with.
const fillerName = "jepsen-filler"

// fillDisk writes a filler file into dir until its file system is full
// (ENOSPC) and returns the bytes written.
func fillDisk(ctx context.Context, dir string) (int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, fillerName), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			if err := ctx.Err(); err != nil {
				return n, err
			}
			w, err := f.Write(buf)
			n += int64(w)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
