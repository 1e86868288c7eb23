package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/link/enroll"
	"termlink/testrig/cluster"
)

// Device identity across the cluster (issue 25): a device asks for a
// pairing code through edge A, the operator approves it on a worker, the
// device collects its token polling edge B and connects with it through
// both edges; the operator's reset on edge B refuses the token on edge A.
// A list token bound on first use through edge A is refused on edge B as
// another peer.
func TestEnrollmentAcrossNodes(t *testing.T) {
	cluster.Heavy(t)
	tc := startCluster(t, clusterOpts{edges: 2, workers: 1,
		channel: map[string]any{"enrollment": true, "tokens": []string{"lab-token"}}})
	edgeA, edgeB, worker := tc.edges[0], tc.edges[1], tc.workers[0]
	ch := "/api/channels/" + cluster.Channel

	var grant enroll.Grant
	if st := call(t, http.MethodPost, edgeA.HTTPURL()+ch+"/enroll", `{"peer_id":"kiosk-x1","device_name":"Kiosk"}`, &grant); st != http.StatusOK || grant.Code == "" {
		t.Fatalf("enroll through edge A: %d %+v", st, grant)
	}
	poll := `{"device_code":"` + grant.DeviceCode + `"}`
	var waiting enroll.ErrorResponse
	if st := call(t, http.MethodPost, edgeB.HTTPURL()+ch+"/enroll/token", poll, &waiting); st != http.StatusBadRequest || waiting.Error != enroll.Pending {
		t.Fatalf("edge B before the approval: %d %+v, want %s", st, waiting, enroll.Pending)
	}
	var listed struct {
		Enrollments []struct{ Code, PeerID string } `json:"enrollments"`
	}
	if st := call(t, http.MethodGet, worker.HTTPURL()+"/api/enrollments", "", &listed); st != http.StatusOK || len(listed.Enrollments) != 1 || listed.Enrollments[0].Code != grant.Code {
		t.Fatalf("the worker's list: %d %+v", st, listed)
	}
	if st := call(t, http.MethodPost, worker.HTTPURL()+"/api/enrollments/"+grant.Code+"/approve", `{"name":"Lobby"}`, nil); st != http.StatusOK {
		t.Fatalf("approve on the worker: %d", st)
	}
	// The device polls every 2 s: the token comes on edge B's next poll.
	time.Sleep(2 * time.Second)
	var tok enroll.TokenResponse
	if st := call(t, http.MethodPost, edgeB.HTTPURL()+ch+"/enroll/token", poll, &tok); st != http.StatusOK || tok.Token == "" || tok.PeerID != "kiosk-x1" {
		t.Fatalf("collect through edge B: %d %+v", st, tok)
	}
	var again enroll.ErrorResponse
	if st := call(t, http.MethodPost, edgeA.HTTPURL()+ch+"/enroll/token", poll, &again); st != http.StatusBadRequest || again.Error != enroll.Invalid {
		t.Fatalf("collect again through edge A: %d %+v, want %s", st, again, enroll.Invalid)
	}

	for _, e := range []*cluster.Server{edgeA, edgeB} {
		if err := exchangeToken(t, e.WSURL(), tok.Token, "kiosk-x1", "hi"); err != nil {
			t.Fatalf("the enrolled device through %s: %v", e.Spec.Name, err)
		}
	}
	if st := call(t, http.MethodDelete, edgeB.HTTPURL()+ch+"/bindings/kiosk-x1", "", nil); st != http.StatusNoContent {
		t.Fatalf("reset on edge B: %d", st)
	}
	if err := exchangeToken(t, edgeA.WSURL(), tok.Token, "kiosk-x1", "again"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("the reset token through edge A: %v, want refused (401)", err)
	}

	// A list token binds to its first peer on every edge.
	if err := exchangeToken(t, edgeA.WSURL(), "lab-token", "lab-1", "first"); err != nil {
		t.Fatalf("a list token's first use through edge A: %v", err)
	}
	if err := exchangeToken(t, edgeB.WSURL(), "lab-token", "lab-2", "second"); err == nil || !strings.Contains(err.Error(), "bound to another peer_id") {
		t.Fatalf("the bound list token as another peer through edge B: %v, want refused", err)
	}
	var bindings struct {
		Bindings []struct {
			PeerID string `json:"peer_id"`
			Source string `json:"source"`
		} `json:"bindings"`
	}
	if st := call(t, http.MethodGet, edgeB.HTTPURL()+ch+"/bindings", "", &bindings); st != http.StatusOK || len(bindings.Bindings) != 1 || bindings.Bindings[0].PeerID != "lab-1" {
		t.Fatalf("edge B's bindings: %d %+v", st, bindings)
	}
}

// call sends body (JSON, or none) to url from loopback (an operator
// without admin tokens), decodes the answer into out if set, and returns
// the status.
func call(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // the guard's rule for writes
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// exchangeToken connects as peer with token, sends text and waits for
// its reply; the error says how the server refused (the status before
// the upgrade, or its error frame).
func exchangeToken(t *testing.T, url, token, peer, text string) error {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: waitFor}
	ws, resp, err := d.Dial(url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp != nil {
			return &refused{resp.Status}
		}
		return err
	}
	defer ws.Close()
	for _, f := range []link.Frame{&link.Connect{PeerID: peer}, &link.Message{MessageID: "m-" + text, Text: text}} {
		_ = ws.SetWriteDeadline(time.Now().Add(waitFor))
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
			return err
		}
	}
	_ = ws.SetReadDeadline(time.Now().Add(waitFor))
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return err
		}
		f, err := link.Decode(data)
		if err != nil {
			t.Fatalf("frame %s: %v", data, err)
		}
		switch f := f.(type) {
		case *link.Ack:
			if f.Reply != nil {
				return nil
			}
		case *link.Message:
			if f.MessageID == "m-"+text {
				return nil
			}
		case *link.Error:
			return &refused{f.Code + ": " + f.Error}
		}
	}
}

type refused struct{ why string }

func (r *refused) Error() string { return "refused: " + r.why }
