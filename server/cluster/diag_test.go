package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"termlink/internal/testwait"
)

// The diag transport: a request for a peer goes to the edge that holds
// it and comes back with that edge's answer; a peer no edge holds, or
// this node's own, is said so without a request; an edge that does not
// serve, or serves its bound already, or answers past the bound, is an
// error naming it; Close ends what an edge serves and waits for it.
func TestDiagTransport(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	url := startJetStream(t)
	edgeA := openNode(t, url, "edge-a") // closed mid-test (and again when it ends)
	edgeB := openNode(t, url, "edge-b")
	mute := openNode(t, url, "edge-mute") // holds a peer, serves no diag requests
	opt := DiagOptions{MaxRequest: 64, MaxAnswer: 1 << 10, MaxServing: 1}

	hold := make(chan struct{})
	served := make(chan string, 4)
	if err := edgeA.ServeDiag(func(ctx context.Context, req []byte) []byte {
		served <- string(req)
		switch string(req) {
		case "hold":
			select {
			case <-hold:
			case <-ctx.Done():
				return []byte("ended")
			}
		case "big":
			return bytes.Repeat([]byte("x"), 2<<10)
		}
		return []byte("answer to " + string(req))
	}, opt); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		n    *Node
		peer string
	}{{edgeA, "kiosk-a"}, {edgeB, "kiosk-b"}, {mute, "kiosk-mute"}} {
		if _, err := p.n.SetPresence(ctx, "ch", p.peer); err != nil {
			t.Fatal(err)
		}
	}

	edge, ans, err := edgeB.AskDiag(ctx, "ch", "kiosk-a", []byte("logs"), opt)
	if err != nil || edge != "edge-a" || string(ans) != "answer to logs" {
		t.Fatalf("ask edge-a: %q %q %v", edge, ans, err)
	}
	<-served
	if _, _, err := edgeB.AskDiag(ctx, "ch", "nobody", []byte("logs"), opt); !errors.Is(err, ErrNoEdge) {
		t.Errorf("a peer no edge holds: %v, want ErrNoEdge", err)
	}
	if _, _, err := edgeB.AskDiag(ctx, "ch", "kiosk-b", []byte("logs"), opt); !errors.Is(err, ErrHeldHere) {
		t.Errorf("a peer this node holds: %v, want ErrHeldHere", err)
	}
	if _, _, err := edgeB.AskDiag(ctx, "ch", "kiosk-mute", []byte("logs"), opt); err == nil || !strings.Contains(err.Error(), "edge edge-mute does not answer diag requests") {
		t.Errorf("an edge that serves none: %v", err)
	}
	if _, _, err := edgeB.AskDiag(ctx, "ch", "kiosk-a", bytes.Repeat([]byte("q"), 65), opt); err == nil || !strings.Contains(err.Error(), "more than 64") {
		t.Errorf("a request past the bound: %v", err)
	}
	if _, _, err := edgeB.AskDiag(ctx, "ch", "kiosk-a", []byte("big"), opt); err == nil || !strings.Contains(err.Error(), "edge edge-a answered 2048 bytes, more than 1024") {
		t.Errorf("an answer past the bound: %v", err)
	}
	<-served

	// One served at a time (MaxServing 1): the next is refused at once.
	held := make(chan error, 1)
	go func() {
		_, ans, err := edgeB.AskDiag(ctx, "ch", "kiosk-a", []byte("hold"), opt)
		if err == nil && string(ans) != "ended" {
			err = errors.New("answer " + string(ans))
		}
		held <- err
	}()
	<-served
	if _, _, err := edgeB.AskDiag(ctx, "ch", "kiosk-a", []byte("logs"), opt); !errors.Is(err, ErrEdgeBusy) {
		t.Errorf("past MaxServing: %v, want ErrEdgeBusy", err)
	}
	if n := edgeA.Serving(); n != 1 {
		t.Errorf("edge-a serves %d, want 1", n)
	}
	// Close ends the one served: its answer still goes out.
	edgeA.Close()
	if err := <-held; err != nil {
		t.Errorf("the request served at Close: %v", err)
	}
	close(hold)
}
