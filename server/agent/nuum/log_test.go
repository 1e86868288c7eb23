package nuum

import (
	"testing"

	"termlink/server/agent/stdio/stdiotest"
	"termlink/server/config"
)

// recordLog makes o's logger also record into the returned Log.
func recordLog(o *Options) *stdiotest.Log {
	var rec *stdiotest.Log
	o.Logger, rec = stdiotest.RecordLog(o.Logger)
	return rec
}

// newRecordedRunner is newRunner with its log recorded.
func newRecordedRunner(tb testing.TB, flags string, edit func(*Options)) (*Runner, *stdiotest.Log) {
	tb.Helper()
	var rec *stdiotest.Log
	r := newRunner(tb, flags, func(_ *config.NuumAgent, o *Options) {
		if edit != nil {
			edit(o)
		}
		rec = recordLog(o)
	})
	return r, rec
}
