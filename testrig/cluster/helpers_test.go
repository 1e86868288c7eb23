package cluster

import "os"

func writeScript(path, body string) error {
	return os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
}
