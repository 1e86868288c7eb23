package enroll

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"termlink/internal/durable"
)

// TokenFileName is the device token's file in the state dir.
const TokenFileName = "token"

// SaveToken keeps token in stateDir/token, mode 0600, in a dir of mode
// 0700 (made if missing, tightened if looser), and returns the path.
func SaveToken(stateDir, token string) (string, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", fmt.Errorf("keeping the device token: %w", err)
	}
	if err := os.Chmod(stateDir, 0o700); err != nil {
		return "", fmt.Errorf("keeping the device token: %w", err)
	}
	path := filepath.Join(stateDir, TokenFileName)
	// durable.WriteFile's temporary file is made 0600 by os.CreateTemp.
	err := durable.WriteFile(path, func(w *bufio.Writer) error {
		_, err := w.WriteString(token + "\n")
		return err
	}, false)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("keeping the device token: %w", err)
	}
	return path, nil
}

// ReadTokenFile reads a token file, refusing one that group or others
// may read or write: a token is a device's identity.
func ReadTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o: group or others may read it; run: chmod 600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}
