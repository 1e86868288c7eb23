package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The job both peers do is termrig load's: a device sends a message and
// gets "You said: <text>" back. Over MQTT, device ID publishes to its
// request topic dev/ID/req and subscribes to its reply topic dev/ID/rep;
// the responder subscribes to every request topic and answers on the
// reply topic of the device that asked. Both directions are QoS 1.
//
// A request's payload is "<message id> <text>", a reply's "<message id>
// You said: <text>". A message id is the load run's id, a dash and the
// message's sequence number in the run ("1a2b3c4d-17"): the generator
// finds the message a reply answers without a map, and tells a reply of
// an earlier run (a persistent session's leftover) from one of its own.

const (
	topicPrefix = "dev/"
	reqSuffix   = "/req"
	repSuffix   = "/rep"
	replyPrefix = "You said: "
	// requestFilter matches every device's request topic.
	requestFilter = "dev/+/req"
	// maxIDBytes bounds a device id and a message id.
	maxIDBytes = 128
)

// requestTopic and replyTopic are device id's topics.
func requestTopic(id string) string { return topicPrefix + id + reqSuffix }
func replyTopic(id string) string   { return topicPrefix + id + repSuffix }

// deviceOf returns the device id of request topic t.
func deviceOf(t string) (string, error) {
	id, ok := strings.CutPrefix(t, topicPrefix)
	if ok {
		id, ok = strings.CutSuffix(id, reqSuffix)
	}
	switch {
	case !ok:
		return "", fmt.Errorf("topic %.64q is not a request topic (%s)", t, requestFilter)
	case id == "" || strings.Contains(id, "/"):
		return "", fmt.Errorf("topic %.64q: device id empty or with a /", t)
	case len(id) > maxIDBytes:
		return "", fmt.Errorf("topic %.64q...: device id of %d bytes (at most %d)", t, len(id), maxIDBytes)
	}
	return id, nil
}

// appendRequest appends the payload of message id with text to b.
func appendRequest(b []byte, id, text string) []byte {
	b = append(b, id...)
	b = append(b, ' ')
	return append(b, text...)
}

// splitPayload splits a request or reply payload at its first space.
func splitPayload(p []byte) (id, rest []byte, err error) {
	id, rest, ok := bytes.Cut(p, []byte{' '})
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("payload %.32q: no space after the message id", p)
	case len(id) == 0:
		return nil, nil, errors.New("payload starts with a space: no message id")
	case len(id) > maxIDBytes:
		return nil, nil, fmt.Errorf("payload: message id of %d bytes (at most %d)", len(id), maxIDBytes)
	}
	return id, rest, nil
}

// answer is the responder's whole job: the reply topic and payload for a
// request published on topic with payload p, appended to b.
func answer(b []byte, topic string, p []byte) (string, []byte, error) {
	dev, err := deviceOf(topic)
	if err != nil {
		return "", b, err
	}
	id, text, err := splitPayload(p)
	if err != nil {
		return "", b, fmt.Errorf("device %s: %w", dev, err)
	}
	b = append(b, id...)
	b = append(b, ' ')
	b = append(b, replyPrefix...)
	b = append(b, text...)
	return replyTopic(dev), b, nil
}

// messageID is a load run's id for message n.
func messageID(run string, n int64) string { return run + "-" + strconv.FormatInt(n, 10) }

// parseReply returns the sequence number of the message reply payload p
// answers, ok false when it answers another run's message. An error is a
// payload that is not a reply at all.
func parseReply(run string, p []byte) (n int64, ok bool, err error) {
	id, text, err := splitPayload(p)
	if err != nil {
		return 0, false, err
	}
	if !bytes.HasPrefix(text, []byte(replyPrefix)) {
		return 0, false, fmt.Errorf("reply %.32q does not start with %q", text, replyPrefix)
	}
	r, seq, found := bytes.Cut(id, []byte{'-'})
	if !found || string(r) != run {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(string(seq), 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("reply to message %q: bad sequence number", id)
	}
	return n, true, nil
}
