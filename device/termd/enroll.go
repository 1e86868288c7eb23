package termd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"termlink/device"
	"termlink/link/enroll"
)

// loadToken finds the device token: --token-file, else the token an
// earlier enrollment kept in the state dir; "" when there is none. A
// token file group or others may read is refused (enroll.ReadTokenFile).
func loadToken(tokenFile, stateDir string) (string, error) {
	if tokenFile != "" {
		tok, err := enroll.ReadTokenFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return tok, nil
	}
	kept := filepath.Join(stateDir, enroll.TokenFileName)
	if _, err := os.Stat(kept); err != nil {
		return "", nil // none kept; a state dir that does not work is shown on the display
	}
	return enroll.ReadTokenFile(kept)
}

// enrollHTTP is the HTTP client for the enroll endpoint: the CAs of
// --ca-file for https, and a timeout per request.
func enrollHTTP(caFile string) (*http.Client, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	if caFile == "" {
		return hc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
	}
	hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return hc, nil
}

// enrollDevice gets a device token by pairing code: it asks the
// channel's enroll endpoint for a code, shows it on view, waits for an
// operator to approve it (asking for a new code when one expires), and
// keeps the token in the state dir (0600). It returns the token and the
// peer id the operator approved.
func enrollDevice(ctx context.Context, wsURL, caFile, stateDir, peerID, name string, view device.View, log *slog.Logger) (string, string, error) {
	endpoint, err := enroll.EndpointFor(wsURL)
	if err != nil {
		return "", "", err
	}
	hc, err := enrollHTTP(caFile)
	if err != nil {
		return "", "", err
	}
	c := enroll.Client{HTTP: hc, Endpoint: endpoint}
	show := func(err error) {
		if err != nil {
			log.Warn("drawing the enrollment screen", "err", err)
		}
	}
	for {
		g, err := c.Start(ctx, enroll.StartRequest{PeerID: peerID, DeviceName: name})
		var he *enroll.HTTPError
		switch {
		case ctx.Err() != nil:
			return "", "", ctx.Err()
		case errors.As(err, &he) && he.Status == http.StatusTooManyRequests:
			log.Warn("enroll: rate-limited", "retry_after", he.RetryAfter)
			show(device.ShowEnrollStatus(ctx, view, "Enroll: wait"))
			if !sleepCtx(ctx, max(he.RetryAfter, time.Second)) {
				return "", "", ctx.Err()
			}
			continue
		case errors.As(err, &he) && he.Status/100 == 4:
			return "", "", fmt.Errorf("enrollment refused by the server: %w", err) // off, or no such channel: not worth retrying
		case err != nil:
			log.Warn("enroll: server not reached; trying again", "err", err)
			show(device.ShowEnrollStatus(ctx, view, "Enroll: no server"))
			if !sleepCtx(ctx, 5*time.Second) {
				return "", "", ctx.Err()
			}
			continue
		}
		log.Info("enroll: waiting for an operator to approve the pairing code", "code", g.Code, "console", g.VerificationURI, "expires_in_s", g.ExpiresIn)
		show(device.ShowPairing(ctx, view, g.Code, g.VerificationURI))
		wctx, cancel := context.WithTimeout(ctx, time.Duration(g.ExpiresIn+5)*time.Second)
		tr, err := c.Wait(wctx, g)
		cancel()
		switch {
		case ctx.Err() != nil:
			return "", "", ctx.Err()
		case errors.Is(err, enroll.ErrExpired), errors.Is(err, context.DeadlineExceeded):
			log.Info("enroll: the pairing code expired; asking for a new one")
			continue
		case err != nil:
			return "", "", err
		}
		path, err := enroll.SaveToken(stateDir, tr.Token)
		if err != nil {
			return "", "", err
		}
		log.Info("enrolled: device token kept", "peer_id", tr.PeerID, "file", path)
		show(device.ShowEnrollStatus(ctx, view, "Enrolled as "+tr.PeerID))
		return tr.Token, tr.PeerID, nil
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
