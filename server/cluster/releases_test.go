package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
	"termlink/server/releases"
	"termlink/server/releases/releasestest"
)

func openReleaseStore(t *testing.T, n *Node, opt releases.Options) *releases.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	if opt.Log == nil {
		opt.Log = releasestest.Quiet
	}
	s, err := n.OpenReleases(ctx, opt, ReleasesOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tamperObject puts data as the object of version/platform, its
// metadata (the manifest, who uploaded it) kept.
func tamperObject(t *testing.T, n *Node, version, platform string, data []byte) {
	t.Helper()
	ctx := context.Background()
	obs, err := n.js.ObjectStore(ctx, ReleasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	name := version + "/" + strings.ReplaceAll(platform, "/", "_")
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: info.Metadata}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// The contract of package releases on the cluster's object store: each
// handle is another node of the same NATS.
func TestReleasesContract(t *testing.T) {
	t.Parallel()
	releasestest.Run(t, func(t *testing.T) releasestest.Harness {
		url := startJetStream(t)
		nodes := 0
		var first *Node
		return releasestest.Harness{
			Open: func(t *testing.T, opt releases.Options) *releases.Store {
				nodes++
				n := openNode(t, url, fmt.Sprintf("node-%d", nodes))
				if first == nil {
					first = n
				}
				return openReleaseStore(t, n, opt)
			},
			Tamper: func(t *testing.T, version, platform string, data []byte) {
				tamperObject(t, first, version, platform, data)
			},
		}
	})
}

// Two nodes follow each other: a release uploaded through one is listed
// and served by the other, deleted through the other it is gone from
// the first; uploads through both at once are held by the bucket's own
// bound when each node's view let them through.
func TestReleasesAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openReleaseStore(t, openNode(t, url, "node-a"), releases.Options{})
	b := openReleaseStore(t, openNode(t, url, "node-b"), releases.Options{})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	bin, m := releasestest.Binary(t, priv, "1.0", "linux/arm/6", 500<<10)
	ctx := context.Background()
	if _, err := a.Put(ctx, m, bytes.NewReader(bin), "otto"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "node-b lists the release", func() bool { return len(b.List("")) == 1 })
	f, e, err := b.OpenBinary(ctx, m.Version, m.Platform)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(got, bin) || e.UploadedBy != "otto" {
		t.Fatalf("node-b serves %d bytes, %+v", len(got), e)
	}
	if err := b.Delete(ctx, m.Version, m.Platform, "vera"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "node-a forgets the release", func() bool { return len(a.List("")) == 0 })
	if _, _, err := a.OpenBinary(ctx, m.Version, m.Platform); err == nil || !strings.Contains(err.Error(), "no release 1.0") {
		t.Fatalf("node-a after the delete: %v", err)
	}
}

// The bucket's bound holds what a node's view does not: a store whose
// budget is larger than the bucket's (another node made it smaller) is
// refused by JetStream with the budget's answer, and keeps nothing.
func TestReleasesBucketBound(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	n := openNode(t, url, "node-a")
	if _, err := n.ReleaseStorage(context.Background(), ReleasesOptions{MaxBytes: 1 << 20, MaxReleases: 1, CacheDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	st, err := n.ReleaseStorage(context.Background(), ReleasesOptions{MaxBytes: 1 << 20, MaxReleases: 1, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	s, err := releases.New(ctx, st, releases.Options{MaxBytes: 8 << 20, Log: releasestest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	bin, m := releasestest.Binary(t, priv, "2.0", "linux/amd64", 3<<20)
	_, err = s.Put(context.Background(), m, bytes.NewReader(bin), "otto")
	var re *releases.Error
	if !errors.As(err, &re) || re.Status != 507 || !strings.Contains(re.Msg, "config releases.maxBytes") {
		t.Fatalf("past the bucket's bound: %v", err)
	}
	obs, _ := n.js.ObjectStore(context.Background(), ReleasesBucket)
	stream, _ := n.js.Stream(context.Background(), "OBJ_"+ReleasesBucket)
	info, _ := stream.Info(context.Background())
	if _, err := obs.GetInfo(context.Background(), "2.0/linux_amd64"); err == nil || info.State.Bytes > 64<<10 {
		t.Fatalf("a refused upload left %d bytes in the bucket (%v)", info.State.Bytes, err)
	}
}
