package identity_test

import (
	"io"
	"log/slog"
	"testing"

	"termlink/server/identity"
	"termlink/server/identity/identitytest"
)

// LocalBindings and LocalCodes keep the contract every store keeps.
func TestLocalBindingsContract(t *testing.T) {
	identitytest.Bindings(t, func(t *testing.T) func() identity.Bindings {
		dir := t.TempDir()
		return func() identity.Bindings {
			b, err := identity.OpenLocalBindings(dir, "ch", true, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	})
}

func TestLocalCodesContract(t *testing.T) {
	identitytest.Codes(t, func(*testing.T) identity.Codes { return identity.NewLocalCodes() }, identitytest.DefaultCaps)
}
