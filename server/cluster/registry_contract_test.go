package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/registry"
	"termlink/server/registry/registrytest"
)

// contractDevices is a node with its device registry as the contract
// opens it: closing it closes the node (its publisher's last publish)
// and then its registry, once.
type contractDevices struct {
	*Devices
	n    *Node
	once sync.Once
}

func (c *contractDevices) Close() error {
	var err error
	c.once.Do(func() {
		c.n.Close()
		err = c.Devices.Close()
	})
	return err
}

// The contract of package registry on the cluster's store: Open is the
// edge "edge-a" (restarted: the same name and registry directory, a new
// run), Other another edge on the same NATS, each publishing every 20 ms.
func TestRegistryContract(t *testing.T) {
	t.Parallel()
	registrytest.Run(t, func(t *testing.T) registrytest.Store {
		url := startJetStream(t)
		openEdge := func(t *testing.T, name, dir string, opt registry.Options) registrytest.Registry {
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
			defer cancel()
			cfg := config.Cluster{NATS: []string{url}, Role: config.RoleEdge, Name: name, Partitions: 1,
				Replicas: 1, AckWait: time.Second, Lease: devicesLease, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
			n, err := Open(ctx, cfg, opt.Logger)
			if err != nil {
				t.Fatal(err)
			}
			opt.NoSync = true
			d, err := n.OpenDevices(ctx, dir, opt, DevicesOptions{Flush: 20 * time.Millisecond})
			if err != nil {
				n.Close()
				t.Fatal(err)
			}
			return &contractDevices{Devices: d, n: n}
		}
		dir := t.TempDir()
		others := 0
		return registrytest.Store{
			Open: func(t *testing.T, opt registry.Options) registrytest.Registry { return openEdge(t, "edge-a", dir, opt) },
			Other: func(t *testing.T, opt registry.Options) registrytest.Registry {
				others++
				return openEdge(t, fmt.Sprintf("edge-%d", others+1), t.TempDir(), opt)
			},
		}
	})
}
