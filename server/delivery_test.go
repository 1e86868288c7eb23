package server

import (
	"time"
)

// terminal is the adapter of channel terminal-dev.
func (ts *testServer) terminal() *terminalAdapter {
	return ts.rt.channels["terminal-dev"].adapter.(*terminalAdapter)
}

// setWriteStall shortens the write timeout of connections opened after it.
func (a *terminalAdapter) setWriteStall(d time.Duration) {
	a.mu.Lock()
	a.writeStall = d
	a.mu.Unlock()
}
