package notices_test

import (
	"testing"

	"termlink/server/notices"
	"termlink/server/notices/noticestest"
)

// The contract on the local store: each handle is the workspace's
// directory opened again (once the previous one is closed).
func TestLocalContract(t *testing.T) {
	noticestest.Run(t, func(t *testing.T) func(notices.Options) *notices.Service {
		dir := t.TempDir()
		return func(opt notices.Options) *notices.Service {
			opt.NoSync = true
			s, err := notices.Open(dir, opt)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}
