//go:build !unix

package wal

import "os"

// lockDir does nothing where flock is missing.
func lockDir(string) (*os.File, error) { return nil, nil }
