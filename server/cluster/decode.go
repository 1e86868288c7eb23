package cluster

import (
	"encoding/json"
	"errors"
	"fmt"

	"termlink/server/bus"
)

// The messages nodes exchange are JSON; a message that does not decode, or
// lacks what names it, is refused with an error that says which (another
// node's bug, or a stranger on the subject), never taken as a message.

func decodeIn(data []byte) (inMsg, error) {
	var m inMsg
	if err := json.Unmarshal(data, &m); err != nil {
		return inMsg{}, fmt.Errorf("inbound message is not JSON: %w", err)
	}
	switch {
	case m.ChannelID == "":
		return inMsg{}, errors.New("inbound message without a channel")
	case m.PeerID == "":
		return inMsg{}, errors.New("inbound message without a peer_id")
	case m.SessionKey == "":
		return inMsg{}, errors.New("inbound message without a session key")
	case m.MessageID == "":
		return inMsg{}, errors.New("inbound message without a message_id")
	}
	return m, nil
}

func decodeOut(data []byte) (outMsg, error) {
	var m outMsg
	if err := json.Unmarshal(data, &m); err != nil {
		return outMsg{}, fmt.Errorf("outbound message is not JSON: %w", err)
	}
	switch {
	case m.ChannelID == "" || m.PeerID == "":
		return outMsg{}, errors.New("outbound message without a channel or peer")
	case m.MessageID == "":
		return outMsg{}, errors.New("outbound message without a message_id")
	case m.Kind > bus.QuestionClosed:
		return outMsg{}, fmt.Errorf("outbound message of unknown kind %d", m.Kind)
	}
	return m, nil
}

func decodeClaim(data []byte) (Claim, error) {
	var c Claim
	if err := json.Unmarshal(data, &c); err != nil {
		return Claim{}, fmt.Errorf("claim is not JSON: %w", err)
	}
	switch c.State {
	case StatePending, StateRunning, StateCancel:
	case StateDone:
		if c.Reply == nil {
			return Claim{}, errors.New("claim done without a reply")
		}
	default:
		return Claim{}, fmt.Errorf("claim in unknown state %q", c.State)
	}
	if c.Session == "" || c.MessageID == "" {
		return Claim{}, errors.New("claim without a session or message_id")
	}
	return c, nil
}

func decodeHist(data []byte) (histEntry, error) {
	var e histEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return histEntry{}, fmt.Errorf("history message is not JSON: %w", err)
	}
	switch {
	case e.Session == "":
		return histEntry{}, errors.New("history message without a session or records")
	case e.State != "" && e.State != StateDone:
		return e, nil // a claim not done yet: no turn
	case len(e.Records) == 0:
		return histEntry{}, errors.New("history message without a session or records")
	}
	return e, nil
}
