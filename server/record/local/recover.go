package local

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"termlink/link"
	"termlink/server/bus"
	"termlink/server/record"
	"termlink/server/session"
)

// startupTail is how many records with a message id Recover reads at most
// from the end of each session file. The walk usually stops earlier, after
// session.TailSettled answered messages in a row (all it needs to find
// the unanswered ones); dedupe completes such a partial session from the
// log (its last DedupePerSession messages) on its first unknown id.
const startupTail = 1024

// interruptedTwice answers a message whose run two restarts cut short.
const interruptedTwice = "interrupted twice by a server restart; not run again - send it again"

// parseSessionKey splits a session id; ids, accounts, peers and threads
// contain no ':' (the adapter and the config refuse it).
func parseSessionKey(key string) (channelID, accountID, peerID, threadID string, ok bool) {
	parts := strings.Split(key, ":")
	switch len(parts) {
	case 3:
		return parts[0], parts[1], parts[2], "", true
	case 4:
		return parts[0], parts[1], parts[2], parts[3], true
	}
	return "", "", "", "", false
}

// Recover implements record.Recoverer. It reads the tail of every session
// file (not every record: see startupTail), fills the dedupe table with
// their replies and returns the messages accepted but never answered,
// oldest first per session, to be run (Recovered). A message whose run
// started (run_started) was cut short once: its re-run is recorded
// run_interrupted when it starts (reruns). One that has run_interrupted
// (its re-run was cut short too) is answered with an error reply instead
// of a third run. A message that was only waiting when the server stopped
// has neither record, so restarts before its run never count against it.
func (s *Store) Recover(ctx context.Context) ([]bus.Inbound, error) {
	var unanswered []bus.Inbound
	var toMark []interruptedRuns
	sessions, records, twice := 0, 0, 0
	err := s.sessions.ScanTails(startupTail, func(sess *session.Session) error {
		sessions++
		records += len(sess.Records)
		key := sess.Meta.Key
		channelID, accountID, peerID, threadID, ok := parseSessionKey(key)
		if !ok {
			s.log.Warn("session log with a key that is not a terminal session id; skipped for dedupe", "key", key)
			return nil
		}
		asked := map[string]session.Record{}
		answered := map[string]bool{}
		interrupted := map[string]bool{}
		started := map[string]bool{}
		var order []string
		for _, r := range sess.Records {
			if r.MessageID == "" {
				continue
			}
			switch {
			case r.Role == "user":
				if _, seen := asked[r.MessageID]; !seen {
					order = append(order, r.MessageID)
				}
				asked[r.MessageID] = r
			case r.Role == "assistant":
				answered[r.MessageID] = true
			case r.Role == "system" && r.Extra["event"] == record.EventInterrupted:
				interrupted[r.MessageID] = true
			case r.Role == "system" && r.Extra["event"] == record.EventStarted:
				started[r.MessageID] = true
			}
		}
		var marks []session.Record
		var again []bus.Inbound
		for _, id := range order {
			if answered[id] {
				continue
			}
			if !s.opt.Runs(channelID) {
				s.log.Warn("unanswered message of a channel that is gone or disabled; not run", "session", key, "message_id", id)
				continue
			}
			r := asked[id]
			if interrupted[id] {
				twice++
				marks = append(marks, session.Record{Role: "assistant", Content: interruptedTwice, MessageID: id,
					RunID: r.RunID, FinishReason: link.FinishError})
				continue
			}
			if started[id] {
				s.reruns.Store(key+"\x00"+id, true)
			}
			received, _ := time.ParseInLocation(session.TimeLayout, r.Timestamp, time.Local)
			again = append(again, bus.Inbound{ChannelID: channelID, AccountID: accountID, PeerID: peerID,
				ThreadID: threadID, SessionKey: key, MessageID: id, RunID: r.RunID, Text: r.Content,
				Received: received, Recovered: true})
		}
		// The messages to run again are pending from the start, so the
		// byte bound cannot drop the session before they are answered.
		d := s.dedupe
		d.mu.Lock()
		ids := d.insert(key, sess.Records)
		ids.partial = sess.Partial // completed from the log on its first unknown id
		for _, in := range again {
			d.addPending(ids, in.MessageID, in.RunID)
		}
		d.trim(ids)
		d.mu.Unlock()
		if len(marks) == 0 && len(again) == 0 {
			return nil
		}
		toMark = append(toMark, interruptedRuns{key: key, marks: marks, again: again})
		return nil
	})
	if err == nil {
		unanswered = s.markInterrupted(ctx, toMark)
	}
	if err != nil {
		return nil, fmt.Errorf("rebuilding dedupe from the session log: %w", err)
	}
	s.log.Info("dedupe rebuilt from the session log tails", "sessions", sessions, "records", records,
		"unanswered", len(unanswered), "interrupted_twice", twice)
	return unanswered, nil
}

// interruptedRuns are one session's messages found unanswered at start-up:
// the error replies of those cut short twice, and the messages to run again.
type interruptedRuns struct {
	key   string
	marks []session.Record
	again []bus.Inbound
	err   error
}

// markInterrupted writes the error replies of every session (in parallel,
// so the session log commits them together) and returns the messages to
// run again, in order. A session whose records cannot be written is not
// run again now: the next start finds it unanswered again.
func (s *Store) markInterrupted(ctx context.Context, sessions []interruptedRuns) []bus.Inbound {
	var wg sync.WaitGroup
	work := make(chan *interruptedRuns)
	for range min(len(sessions), 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ir := range work {
				if len(ir.marks) > 0 {
					ir.err = s.appendLog(ctx, ir.key, ir.marks...)
				}
			}
		}()
	}
	for i := range sessions {
		work <- &sessions[i]
	}
	close(work)
	wg.Wait()

	var again []bus.Inbound
	for _, ir := range sessions {
		if ir.err != nil {
			s.log.Error("cannot record interrupted runs; not run again until a later start", "session", ir.key, "err", ir.err)
			for _, in := range ir.again {
				s.dedupe.forget(ir.key, in.MessageID)
			}
			continue
		}
		for _, m := range ir.marks {
			if m.Role == "assistant" {
				s.dedupe.finish(ir.key, m.MessageID, &link.Message{Role: link.RoleAssistant, MessageID: m.MessageID,
					RunID: m.RunID, Text: m.Content, FinishReason: m.FinishReason}, nil)
			}
		}
		again = append(again, ir.again...)
	}
	return again
}
