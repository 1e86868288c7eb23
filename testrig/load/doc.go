// Package load is the load generator behind `termrig load`: it opens many
// simulated terminal devices against a terminal WebSocket channel and
// measures what the server does with them.
//
// Every device speaks the real channel protocol (link frames over
// gorilla/websocket): connect, wait for connected, ping every heartbeat,
// send user messages and match acks and assistant replies by message_id.
// Messages go at one total rate spread round-robin over the devices by a
// single shared scheduler, so N devices cost N reader goroutines and a few
// shared goroutines (scheduler, heartbeat, a small writer pool) — idle
// devices (Rate 0) are cheap enough for 10,000 connections from one
// process, which is how server memory per connection is measured.
//
// Run returns a Report: connect successes, failures and their errors,
// connect latency, messages sent/acked/replied/lost, duplicates, error
// frames, throughput and round-trip and ack latency percentiles.
package load
