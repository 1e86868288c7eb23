package enroll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The enroll endpoint's wire format. A device POSTs a StartRequest to
// /api/channels/{channel_id}/enroll and gets a Grant; it then POSTs a
// TokenRequest to .../enroll/token every Interval seconds: 400 with
// ErrorResponse{Error: "authorization_pending"} until an operator
// approves the code, then 200 with a TokenResponse (once: the device code
// is then spent). Both routes take no credentials.
type (
	StartRequest struct {
		PeerID     string `json:"peer_id,omitempty"` // the id the device would like; the operator may change it
		DeviceName string `json:"device_name,omitempty"`
	}
	Grant struct {
		Code            string `json:"code"`        // shown to the person: "K7Q-4MX"
		DeviceCode      string `json:"device_code"` // the device's secret handle on the request
		VerificationURI string `json:"verification_uri"`
		ExpiresIn       int    `json:"expires_in"` // seconds
		Interval        int    `json:"interval"`   // seconds between polls
	}
	TokenRequest struct {
		DeviceCode string `json:"device_code"`
	}
	TokenResponse struct {
		Token     string `json:"token"`
		PeerID    string `json:"peer_id"`
		ChannelID string `json:"channel_id"`
	}
	ErrorResponse struct {
		Error       string `json:"error"`
		Description string `json:"error_description,omitempty"`
	}
)

// Poll answers (RFC 8628 section 3.5).
const (
	Pending  = "authorization_pending"
	SlowDown = "slow_down"
	Expired  = "expired_token"
	Invalid  = "invalid_grant"
)

// ErrExpired is returned by Wait when the code expired before approval.
var ErrExpired = errors.New("the pairing code expired before an operator approved it")

// EndpointFor turns a channel's WebSocket URL
// (ws://host/api/channels/X/ws) into its enroll endpoint
// (http://host/api/channels/X/enroll).
func EndpointFor(channelURL string) (string, error) {
	u, err := url.Parse(channelURL)
	if err != nil {
		return "", fmt.Errorf("enroll endpoint of %q: %w", channelURL, err)
	}
	switch u.Scheme {
	case "ws", "http":
		u.Scheme = "http"
	case "wss", "https":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("enroll endpoint of %q: scheme must be ws, wss, http or https", channelURL)
	}
	p, ok := strings.CutSuffix(u.Path, "/ws")
	if !ok || !strings.HasPrefix(p, "/api/channels/") {
		return "", fmt.Errorf("enroll endpoint of %q: want a channel URL like ws://host:8080/api/channels/terminal-dev/ws", channelURL)
	}
	u.Path, u.RawQuery = p+"/enroll", ""
	return u.String(), nil
}

// Client talks to one channel's enroll endpoint.
type Client struct {
	HTTP     *http.Client // default: http.DefaultClient
	Endpoint string       // from EndpointFor
}

func (c Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// post sends v as JSON and decodes a 2xx answer into out; other answers
// come back as *HTTPError.
func (c Client) post(ctx context.Context, u string, v, out any) error {
	body, _ := json.Marshal(v)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("reading the answer of %s: %w", u, err)
	}
	if resp.StatusCode/100 != 2 {
		he := &HTTPError{Status: resp.StatusCode}
		var er ErrorResponse
		if json.Unmarshal(b, &er) == nil {
			he.Code, he.Description = er.Error, er.Description
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			he.RetryAfter = time.Duration(s) * time.Second
		}
		return he
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("the answer of %s is not what an enroll endpoint sends: %w", u, err)
	}
	return nil
}

// HTTPError is a refusal by the enroll endpoint.
type HTTPError struct {
	Status      int
	Code        string // "authorization_pending", ..., or the server's error text
	Description string
	RetryAfter  time.Duration // from a 429's Retry-After
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("HTTP %d: %s", e.Status, e.Code)
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

// Start asks for a pairing code.
func (c Client) Start(ctx context.Context, r StartRequest) (Grant, error) {
	var g Grant
	if err := c.post(ctx, c.Endpoint, r, &g); err != nil {
		return g, fmt.Errorf("asking %s for a pairing code: %w", c.Endpoint, err)
	}
	if g.Code == "" || g.DeviceCode == "" {
		return g, fmt.Errorf("asking %s for a pairing code: the answer has no code", c.Endpoint)
	}
	return g, nil
}

// Wait polls until the code is approved (the token), expires
// (ErrExpired), or ctx ends.
func (c Client) Wait(ctx context.Context, g Grant) (TokenResponse, error) {
	interval := time.Duration(max(g.Interval, 1)) * time.Second
	for {
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return TokenResponse{}, ctx.Err()
		case <-t.C:
		}
		var tr TokenResponse
		err := c.post(ctx, c.Endpoint+"/token", TokenRequest{DeviceCode: g.DeviceCode}, &tr)
		var he *HTTPError
		switch {
		case err == nil && tr.Token != "":
			return tr, nil
		case err == nil:
			return tr, fmt.Errorf("waiting for approval at %s: the answer has no token", c.Endpoint)
		case errors.As(err, &he) && he.Code == Pending:
		case errors.As(err, &he) && he.Code == SlowDown:
			interval += 5 * time.Second
		case errors.As(err, &he) && he.Status == http.StatusTooManyRequests:
			interval = max(interval, he.RetryAfter)
		case errors.As(err, &he) && he.Code == Expired:
			return tr, ErrExpired
		case errors.As(err, &he):
			return tr, fmt.Errorf("waiting for approval at %s: %w", c.Endpoint, err)
		default: // the network: keep trying until the code expires
			if ctx.Err() != nil {
				return tr, ctx.Err()
			}
		}
	}
}
