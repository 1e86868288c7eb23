package wschannel

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"termlink/internal/testpki"
)

// flushConn's promise holds over TLS (stallConn under the tls.Conn): a
// slow reader that keeps taking data is served past the stall period, a
// reader that stopped is cut off with errStalled.
func TestFlushConnStallOverTLS(t *testing.T) {
	const stall = time.Second
	payload := make([]byte, 4<<20)
	pair := func(t *testing.T) (*tls.Conn, *flushConn) {
		client, server := tcpPair(t)
		ca := testpki.NewCA(t, t.TempDir(), "lab")
		leaf := ca.Server(t, "server")
		cert, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca.Cert)
		st := tls.Server(&stallConn{Conn: server}, &tls.Config{Certificates: []tls.Certificate{cert}})
		ct := tls.Client(client, &tls.Config{RootCAs: pool, ServerName: "localhost"})
		errc := make(chan error, 1)
		go func() { errc <- st.Handshake() }()
		if err := ct.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		return ct, newFlushConn(st, stall)
	}
	t.Run("slow reader", func(t *testing.T) {
		client, fc := pair(t)
		done := make(chan error, 1)
		go func() { _, err := fc.Write(payload); done <- err }()
		readSlowly(t, client, len(payload))
		if err := <-done; err != nil {
			t.Fatalf("write to a slow reader over TLS: %v", err)
		}
	})
	t.Run("stopped reader", func(t *testing.T) {
		_, fc := pair(t)
		if _, err := fc.Write(payload); !errors.Is(err, errStalled) {
			t.Fatalf("write to a reader that stopped: %v, want errStalled", err)
		}
	})
}
