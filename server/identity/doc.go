// Package identity is termserver's device identity: which device may
// connect as which peer_id, and how a device without a credential gets
// one (issue 14, issue 22; moved out of package server by issue 24).
//
// It owns:
//   - Token bindings (Bindings): per channel, the tokens the server learnt
//     (a list token bound on first use, a token issued by enrollment),
//     kept as SHA-256 digests, and the decision on a connect (Authorize)
//     that weighs them against the config's tokens. LocalBindings keeps
//     them in workspace/credentials/<channel>.json.
//   - Pairing codes (Codes): the enrollment requests waiting for an
//     operator, in the shape of RFC 8628's device grant. LocalCodes keeps
//     them in memory.
//   - Mutual TLS client certificates (ClientAuth, PeerIdentity): a
//     channel's CA and deny list, and the peer_id a certificate names.
//   - The HTTP routes of all three (Service.Routes): the bindings API,
//     the device's enroll endpoints (limited per source network), and
//     the operator's list/approve/deny, each reading its body with
//     httpapi.Decode, the API's one body policy.
//
// Bindings and Codes are interfaces: package cluster implements both on
// JetStream (issue 25: a code asked for through one edge is approved on
// another, a token bound on one edge holds on every edge), beside the
// local ones, without an edit of the routes. The rules stay here, as pure
// functions every store calls: Decide (a connect), Pending.DropDue (when
// a code leaves), Pending.NotePoll and SlowDown (a poll), Victim (who is
// evicted at the cap); a store answers in the package's own terms
// (PollResult, NotPendingError, ...). identitytest is the contract every
// store passes. The per-network rate limits stay with each Service (an
// edge limits what reaches it).
//
// The server's root package builds a Service over its channels (New),
// registers its routes on the mux behind its guard, and calls
// Bindings.Authorize/Known and ClientAuth.Check from the connection side.
// This package does not import package server.
package identity
