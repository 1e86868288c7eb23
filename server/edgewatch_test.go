package server

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"termlink/server/cluster"
	"termlink/server/cluster/natstest"
	"termlink/server/config"
)

// TestClusterEdgeCutOffFromNATS: an edge whose NATS stops answering
// (the only NATS server it knows is gone) closes its device connections
// with 1013 once a lease has passed without an answer, refuses new ones
// with HTTP 503 and the reason, and says so on /healthz and /api/status;
// when NATS is back it takes devices again.
func TestClusterEdgeCutOffFromNATS(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t, true)
	natsURL, storeDir := ns.ClientURL(), ns.JetStreamConfig().StoreDir
	var back *natsserver.Server
	t.Cleanup(func() { // after the termserver's shutdown (cleanups run last first)
		if back != nil {
			back.Shutdown()
			back.WaitForShutdown()
		}
	})
	const lease = time.Second
	ts := startServer(t, func(c *config.Config) {
		c.Cluster = config.Cluster{NATS: []string{natsURL}, Role: config.RoleAll, Name: "edge-a", Partitions: 1, Replicas: 1,
			AckWait: time.Second, Lease: lease, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	}, nil)
	c := dial(t, ts.ws, nil)
	c.connect("p1")
	if code, body := httpGet(t, ts.http.URL+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before the cut: %d %s", code, body)
	}
	// Longer than a lease with NATS answering: nothing happens.
	time.Sleep(2 * lease)
	c.alive()

	cut := time.Now()
	ns.Shutdown()
	ns.WaitForShutdown()
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var err error
	for err == nil {
		_, _, err = c.ws.ReadMessage()
	}
	took := time.Since(cut)
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != cluster.CloseTryElsewhere || !strings.Contains(ce.Text, "edge edge-a has lost the NATS cluster since") {
		t.Fatalf("the device's connection ended with %v, want close %d naming the lost NATS cluster", err, cluster.CloseTryElsewhere)
	}
	// Not before a lease after the last answer, which came up to one
	// probe (lease/5) before the cut (a loaded machine only delays it;
	// the read deadline bounds the wait).
	if took < lease*4/5 {
		t.Errorf("closed %s after NATS stopped, want a lease (%s) after its last answer", took.Round(time.Millisecond), lease)
	}
	t.Logf("closed after %s: %q", took.Round(time.Millisecond), ce.Text)

	_, resp, err := websocket.DefaultDialer.Dial(ts.ws, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a new connection while cut off: %v (%v), want HTTP 503", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "edge edge-a has lost the NATS cluster since") || !strings.Contains(string(body), "connect to another edge") {
		t.Errorf("the 503's body %s does not say why", body)
	}
	if code, body := httpGet(t, ts.http.URL+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "has lost the NATS cluster") {
		t.Errorf("/healthz while cut off: %d %s", code, body)
	}
	var st struct{ Status, Problem string }
	getJSON(t, ts.http.URL+"/api/status", &st)
	if st.Status != "degraded" || !strings.Contains(st.Problem, "has lost the NATS cluster") {
		t.Errorf("/api/status while cut off: %+v", st)
	}

	// NATS back on the same port and store: devices are taken again.
	back = restartNATS(t, natsURL, storeDir)
	if !waitUntil(t, "healthy again", func() bool { code, _ := httpGet(t, ts.http.URL+"/healthz"); return code == http.StatusOK }) {
		t.FailNow()
	}
	c2 := dial(t, ts.ws, nil)
	c2.connect("p1")
	c2.alive()
}

// restartNATS starts a JetStream server again on url's port with
// storeDir.
func restartNATS(t *testing.T, url, storeDir string) *natsserver.Server {
	t.Helper()
	_, portStr, _ := strings.Cut(strings.TrimPrefix(url, "nats://"), ":")
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatalf("port of %s: %v", url, err)
	}
	s, err := natsserver.NewServer(&natsserver.Options{ServerName: "t1", Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: storeDir})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready again in 10 s")
	}
	return s
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
