package fleetsim

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"termlink/release"
)

// Upload signs body as release version for platform with a new key and
// stores it on the termserver at base (http://HOST:PORT) with adminToken
// (none: a loopback server without admin tokens). dir holds the binary
// file the manifest is made from.
func Upload(ctx context.Context, base, adminToken, dir, version, platform string, body []byte) (*release.Manifest, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "termd-"+version)
	if err := os.WriteFile(path, body, 0o755); err != nil {
		return nil, err
	}
	m, err := release.Sign(priv, version, platform, path)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/api/releases/"+version+"/"+platform, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Release-Manifest", base64.StdEncoding.EncodeToString(m.Marshal()))
	if adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("upload of %s for %s: HTTP %d %s", version, platform, resp.StatusCode, b)
	}
	return m, nil
}
