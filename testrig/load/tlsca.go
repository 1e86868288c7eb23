package load

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// caConfig is the TLS configuration of wss:// with the CAs of file as the
// roots; nil when file is empty (the system roots).
func caConfig(file string) (*tls.Config, error) {
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}
