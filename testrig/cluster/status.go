package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Status is the "cluster" object of a node's GET /api/status.
type Status struct {
	Name       string       `json:"name"`
	Role       string       `json:"role"`
	Partitions int          `json:"partitions"`
	Nodes      []NodeStatus `json:"nodes"`
	Problem    string       `json:"problem,omitempty"`
	// Owned are the partitions a worker owns.
	Owned []PartitionStatus `json:"owned,omitempty"`
}

// PartitionStatus is one partition a worker owns in Status: its consumer
// and, while that does not deliver, why (Stuck) and since when (Since,
// RFC 3339).
type PartitionStatus struct {
	Partition int    `json:"partition"`
	Consumer  string `json:"consumer"`
	Releasing bool   `json:"releasing,omitempty"`
	Stuck     string `json:"stuck,omitempty"`
	Since     string `json:"since,omitempty"`
}

// NodeStatus is one node in Status.
type NodeStatus struct {
	Name            string  `json:"name"`
	Role            string  `json:"role"`
	URL             string  `json:"url"`
	DevicesOnline   int     `json:"devicesOnline"`
	PartitionsOwned int     `json:"partitionsOwned"`
	SeenSecondsAgo  float64 `json:"seenSecondsAgo"`
}

// ClusterStatus fetches the cluster object of GET base/api/status.
func ClusterStatus(ctx context.Context, base string) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/api/status: %s", base, resp.Status)
	}
	var st struct {
		Cluster *Status `json:"cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET %s/api/status: %w", base, err)
	}
	if st.Cluster == nil {
		return nil, fmt.Errorf("GET %s/api/status: no cluster object", base)
	}
	return st.Cluster, nil
}

// WaitClusterNodes waits (bounded by ctx and 60 s) until the node at
// base lists n live nodes in its /api/status.
func WaitClusterNodes(ctx context.Context, base string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last string
	for {
		st, err := ClusterStatus(ctx, base)
		switch {
		case err != nil:
			last = err.Error()
		case len(st.Nodes) == n:
			return nil
		default:
			var names []string
			for _, x := range st.Nodes {
				names = append(names, x.Name)
			}
			last = fmt.Sprintf("%s lists %d nodes %v", st.Name, len(st.Nodes), names)
			if st.Problem != "" {
				last += " (problem: " + st.Problem + ")"
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: the cluster has not %d nodes: %s", base, n, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitClusterNodes is the package's WaitClusterNodes on this node; the
// error has the node's log tail.
func (s *Server) WaitClusterNodes(ctx context.Context, n int) error {
	if err := WaitClusterNodes(ctx, s.HTTPURL(), n); err != nil {
		return fmt.Errorf("termserver %s: %w; log:\n%s", s.Spec.Name, err, s.LogTail(20))
	}
	return nil
}
