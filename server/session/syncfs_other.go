//go:build !linux

package session

import (
	"errors"
	"os"
)

func syncFS(*os.File) error { return errors.New("syncfs: not available on this system") }

const haveSyncFS = false
