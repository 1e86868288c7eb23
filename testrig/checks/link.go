package checks

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

// LinkOptions configure LinkTest.
type LinkOptions struct {
	// Server is the server as typed: ws:// or wss:// URL of the channel,
	// or http(s)://host:port, or host:port (the channel path is added).
	Server string
	// Channel is the channel id used when Server has no path; "" means
	// terminal-dev.
	Channel string
	// Token is the device token (Authorization: Bearer, and connect.token).
	Token string
	// CAFile is a PEM file of CA certificates to trust for wss://.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key (PEM), for
	// a channel with mutual TLS; both or neither. The key file must be
	// private to the user (as termd's --key).
	CertFile, KeyFile string
	// TLSConfig is the base TLS configuration (tests); nil means the
	// system's.
	TLSConfig *tls.Config
	// PeerID is the peer id to connect as; "" means "termrig-link-test".
	PeerID string
	// Pings is the number of ping round trips timed; 0 means 20.
	Pings int
	// Timeout bounds each step (dial, connect, one ping, the echo); 0 means
	// 10s.
	Timeout time.Duration
	// NoEcho skips the message round trip (it runs the channel's agent).
	NoEcho bool
}

// LinkTest connects to a termlink server's terminal channel as a device
// does, times N ping round trips (p50/p99) and one message round trip
// (through the channel's agent: the built-in echo answers at once), and
// explains what went wrong when it could not: a refused token, an
// untrusted certificate, a refused client certificate, nothing listening,
// a wrong channel. A refusal's verdict carries the server's own reason
// (the HTTP body, the error frame, the close reason).
func LinkTest(ctx context.Context, o LinkOptions) Result {
	r := newResult("link-test")
	if o.Pings <= 0 {
		o.Pings = 20
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.PeerID == "" {
		o.PeerID = "termrig-link-test"
	}
	wsURL, err := link.ChannelURL(o.Server, o.Channel)
	if err != nil {
		r.Fail("%v", err)
		return *r
	}
	r.Detailf("channel %s as peer_id %s", wsURL, o.PeerID)
	tlsConf, err := linkTLS(o)
	if err != nil {
		r.Fail("%v", err)
		return *r
	}
	header := http.Header{}
	if o.Token != "" {
		header.Set("Authorization", "Bearer "+o.Token)
	}
	d := websocket.Dialer{HandshakeTimeout: o.Timeout, TLSClientConfig: tlsConf, Proxy: http.ProxyFromEnvironment}
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	ws, resp, err := d.DialContext(dctx, wsURL, header)
	cancel()
	if err != nil {
		r.Fail("%s", explainDial(wsURL, o, err, resp))
		return *r
	}
	defer ws.Close()
	stop := context.AfterFunc(ctx, func() { ws.Close() })
	defer stop()
	c := &linkConn{ws: ws, timeout: o.Timeout}

	// Connect.
	connected, err := c.connect(o)
	if err != nil {
		r.Fail("%v", c.explain(ctx, err, o))
		return *r
	}
	connectTime := time.Since(start)
	r.Set("connect_ms", round3(ms(connectTime)))
	r.Detailf("connected in %v: session %s", connectTime.Round(time.Microsecond), connected.SessionID)

	// Pings.
	var rtts []time.Duration
	for range o.Pings {
		rtt, err := c.ping()
		if err != nil {
			r.Fail("ping %d of %d: %v", len(rtts)+1, o.Pings, c.explain(ctx, err, o))
			return *r
		}
		rtts = append(rtts, rtt)
	}
	p50, p99 := percentile(rtts, 50), percentile(rtts, 99)
	r.Set("pings", float64(len(rtts)))
	r.Set("ping_p50_ms", round3(ms(p50)))
	r.Set("ping_p99_ms", round3(ms(p99)))
	r.Set("ping_max_ms", round3(ms(rtts[len(rtts)-1])))
	r.Detailf("%d pings: p50 %v, p99 %v, max %v", len(rtts), p50, p99, rtts[len(rtts)-1])
	summary := fmt.Sprintf("connected in %v; ping p50 %v, p99 %v over %d", connectTime.Round(time.Microsecond), p50, p99, len(rtts))

	// A message round trip through the channel's agent.
	if !o.NoEcho {
		rtt, reply, err := c.echo()
		if err != nil {
			r.Fail("message round trip: %v", c.explain(ctx, err, o))
			return *r
		}
		r.Set("echo_ms", round3(ms(rtt)))
		r.Detailf("message answered in %v: %q", rtt, preview(reply.Text, 60))
		summary += fmt.Sprintf("; message answered in %v", rtt.Round(time.Microsecond))
		if reply.FinishReason != "" && reply.FinishReason != link.FinishStop {
			r.Fail("the agent answered with finish_reason %q: %s", reply.FinishReason, preview(reply.Text, 120))
		}
	}
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "link-test done"), time.Now().Add(time.Second))
	if r.Pass {
		r.Summary = summary
	}
	return *r
}

func preview(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func linkTLS(o LinkOptions) (*tls.Config, error) {
	var conf *tls.Config
	if o.TLSConfig != nil {
		conf = o.TLSConfig.Clone()
	}
	base := func() {
		if conf == nil {
			conf = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", o.CAFile)
		}
		base()
		conf.RootCAs = pool
	}
	if o.CertFile != "" || o.KeyFile != "" {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, errors.New("--cert and --key go together: give both")
		}
		if err := link.CheckPrivateFile(o.KeyFile); err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate %s with the key %s (--cert, --key): %w", o.CertFile, o.KeyFile, err)
		}
		base()
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// aboutCert reports whether a server's refusal is about the client
// certificate (mutual TLS) rather than the token.
func aboutCert(reason string) bool {
	r := strings.ToLower(reason)
	return strings.Contains(r, "certificate") || strings.Contains(r, "mutual tls")
}

// certRefusal words a refusal of the client certificate, with the
// server's reason and what to do about it.
func certRefusal(what string, o LinkOptions, reason string) string {
	if o.CertFile == "" {
		return fmt.Sprintf("the server wants a client certificate%s: pass --cert and --key (%s)", what, reason)
	}
	return fmt.Sprintf("the server refused the client certificate %s%s: %s", o.CertFile, what, reason)
}

// explainDial says why the WebSocket could not be opened.
func explainDial(wsURL string, o LinkOptions, err error, resp *http.Response) string {
	host := wsURL
	if u, perr := url.Parse(wsURL); perr == nil {
		host = u.Host
	}
	if resp != nil {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		msg := strings.TrimSpace(string(body))
		switch {
		case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && aboutCert(msg):
			return certRefusal(fmt.Sprintf(" (HTTP %d)", resp.StatusCode), o, msg)
		case resp.StatusCode == http.StatusUnauthorized && o.Token == "":
			return fmt.Sprintf("the server wants a token (HTTP 401): pass --token (%s)", msg)
		case resp.StatusCode == http.StatusUnauthorized:
			return fmt.Sprintf("the server refused the token (HTTP 401): check --token against the channel's tokens in the server config (%s)", msg)
		case resp.StatusCode == http.StatusNotFound:
			return fmt.Sprintf("no such channel on the server (HTTP 404 for %s): check --channel or the URL's path (GET /api/channels lists them)", wsURL)
		case resp.StatusCode == http.StatusBadRequest && strings.Contains(strings.ToLower(msg), "https"):
			return fmt.Sprintf("the server speaks TLS: use wss:// instead of ws:// (%s)", msg)
		}
		return fmt.Sprintf("the server answered HTTP %s instead of upgrading to a WebSocket: %s", resp.Status, msg)
	}
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &hostErr):
		return fmt.Sprintf("the server's certificate is not valid for %s (%v): connect with the name in the certificate", host, hostErr)
	case errors.As(err, &invalid):
		return fmt.Sprintf("the server's certificate is invalid: %v", invalid)
	case errors.As(err, &unknownCA):
		if o.CAFile != "" {
			return fmt.Sprintf("the server's certificate is not trusted, not even with --ca-file %s: is it the CA that signed the server's certificate? (%v)", o.CAFile, err)
		}
		return fmt.Sprintf("the server's certificate is not trusted: pass --ca-file with the CA that signed it (%v)", err)
	case errors.As(err, &verify):
		return fmt.Sprintf("the server's certificate is not trusted: pass --ca-file (%v)", err)
	case isCertRequired(err):
		return certRefusal(" (TLS handshake)", o, err.Error())
	case errors.As(err, &recErr):
		return fmt.Sprintf("the server at %s does not speak TLS: use ws:// instead of wss://", host)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens at %s: is termserver running, and listening on an address this machine reaches (--listen)?", host)
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot resolve %s: %v", dnsErr.Name, dnsErr)
	case errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("no answer from %s within %v: a firewall, or the wrong address?", host, o.Timeout)
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	return fmt.Sprintf("dialing %s: %v", wsURL, err)
}

// isCertRequired reports a handshake the server ended because it wanted a
// client certificate (a server that requires one at the TLS layer).
func isCertRequired(err error) bool {
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return alert == 116 || alert == 42 // certificate_required; bad_certificate
	}
	s := err.Error()
	return strings.Contains(s, "certificate required") || strings.Contains(s, "bad certificate")
}

// linkConn speaks the channel protocol over one WebSocket, one frame at a
// time (the test never has two requests in flight).
type linkConn struct {
	ws      *websocket.Conn
	timeout time.Duration
}

// refusedError is an error frame the server sent.
type refusedError struct{ f *link.Error }

func (e *refusedError) Error() string {
	if e.f.Code != "" {
		return fmt.Sprintf("the server sent an error (%s): %s", e.f.Code, e.f.Error)
	}
	return "the server sent an error: " + e.f.Error
}

func (c *linkConn) write(f link.Frame) error {
	data, err := link.Encode(f)
	if err != nil {
		return err
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// read returns the next frame, answering the server's pings on the way.
// An error frame is returned as a *refusedError.
func (c *linkConn) read(deadline time.Time) (link.Frame, error) {
	for {
		_ = c.ws.SetReadDeadline(deadline)
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		f, err := link.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("the server sent a frame that does not decode: %w", err)
		}
		switch f := f.(type) {
		case *link.Ping:
			if err := c.write(&link.Pong{}); err != nil {
				return nil, err
			}
			continue
		case *link.Error:
			return nil, &refusedError{f}
		}
		return f, nil
	}
}

func (c *linkConn) connect(o LinkOptions) (*link.Connected, error) {
	if err := c.write(&link.Connect{PeerID: o.PeerID, DeviceName: "termrig link-test", Capabilities: []string{link.CapText}, Token: o.Token}); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(c.timeout)
	for {
		f, err := c.read(deadline)
		if err != nil {
			return nil, err
		}
		if cf, ok := f.(*link.Connected); ok {
			return cf, nil
		}
	}
}

func (c *linkConn) ping() (time.Duration, error) {
	start := time.Now()
	if err := c.write(&link.Ping{}); err != nil {
		return 0, err
	}
	deadline := start.Add(c.timeout)
	for {
		f, err := c.read(deadline)
		if err != nil {
			return 0, err
		}
		if _, ok := f.(*link.Pong); ok {
			return time.Since(start), nil
		}
	}
}

func (c *linkConn) echo() (time.Duration, *link.Message, error) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	id := "termrig-link-test-" + hex.EncodeToString(nonce[:])
	text := "termrig link-test " + hex.EncodeToString(nonce[:])
	start := time.Now()
	if err := c.write(&link.Message{MessageID: id, Text: text}); err != nil {
		return 0, nil, err
	}
	deadline := start.Add(c.timeout)
	for {
		f, err := c.read(deadline)
		if err != nil {
			return 0, nil, err
		}
		switch f := f.(type) {
		case *link.Ack:
			if f.MessageID == id && !f.Accepted {
				return 0, nil, errors.New("the server did not accept the message")
			}
		case *link.Message:
			if f.MessageID == id && f.IsReply() {
				return time.Since(start), f, nil
			}
		}
	}
}

// explain turns an error met after the WebSocket opened into a sentence.
func (c *linkConn) explain(ctx context.Context, err error, o LinkOptions) error {
	var ref *refusedError
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case errors.As(err, &ref) && ref.f.Code == link.CodeUnauthorized && strings.Contains(ref.f.Error, "certificate is for peer"):
		return fmt.Errorf("the server refused peer_id %s for this client certificate: %s (pass the certificate's peer as --peer-id)", o.PeerID, ref.f.Error)
	case errors.As(err, &ref) && ref.f.Code == link.CodeUnauthorized && aboutCert(ref.f.Error):
		return errors.New(certRefusal("", o, ref.f.Error))
	case errors.As(err, &ref) && ref.f.Code == link.CodeUnauthorized && o.Token == "":
		return fmt.Errorf("the server wants a token: pass --token (%s)", ref.f.Error)
	case errors.As(err, &ref) && ref.f.Code == link.CodeUnauthorized:
		return fmt.Errorf("the server refused the token: %s", ref.f.Error)
	case errors.As(err, &ref) && ref.f.Code == link.CodeReplaced:
		return fmt.Errorf("another connection with peer_id %s replaced this one: pass another --peer-id", o.PeerID)
	case errors.As(err, &ref):
		return err
	case errors.As(err, &ce) && aboutCert(ce.Text):
		return fmt.Errorf("the server closed the connection (%d): %s", ce.Code, certRefusal("", o, ce.Text))
	case errors.As(err, &ce):
		return fmt.Errorf("the server closed the connection (%d %s)", ce.Code, ce.Text)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer within %v", c.timeout)
	}
	return err
}
