// Package webhook is the txbox sender for HTTP webhooks: every message is
// POSTed to its route's URL, and a 2xx response is the acknowledgement.
//
// What a receiver sees, per request:
//
//   - the body is the event payload, byte for byte;
//   - Content-Type comes from the message's "content-type" header when it
//     has one, else from Config.ContentType (application/octet-stream by
//     default: txbox does not know what the payload is);
//   - Idempotency-Key is the event id, so a receiver (or txbox's inbox)
//     drops the duplicates that at-least-once delivery produces;
//   - every message header travels as an HTTP header of the same name
//     (HTTP names are case-insensitive; Go sends them canonicalized, e.g.
//     Txbox-Event-Id), including txbox-event-id, txbox-event-type,
//     txbox-created-at, and txbox-key when the event has a key; HTTP
//     trims the whitespace around a value, and a header name or value
//     HTTP cannot carry fails the message (Permanent) instead of being
//     altered;
//   - with Config.Secret set, a signature header (Txbox-Signature by
//     default) "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">", the
//     scheme Stripe made familiar. Receivers check it with [Verify], which
//     also bounds the timestamp's age so a captured request cannot be
//     replayed later.
//
// How responses are classified (see [github.com/txbox/txbox.Classify]):
// 2xx acks; 408 and 429 are Transient (the receiver is overloaded, not
// refusing the message); 413 is Permanent (the receiver will never take a
// body that large: dead-lettered at once, with the size and the
// receiver's reason); other 4xx are Rejected (the relay counts an attempt
// and retries with backoff, then dead-letters), except those listed in
// Config.PermanentStatus, which are Permanent (dead-lettered at once); 5xx,
// timeouts and network
// errors (an untrusted TLS certificate included) are Transient. Whether a
// transient failure counts an attempt is the relay's decision, by
// destination: none while the endpoint fails as a whole, one per try for a
// message that keeps failing while the endpoint accepts others
// (docs/concepts.md). Redirects
// are not followed: a 3xx is Rejected, since following one would turn the
// POST into a GET on most status codes. A
// non-2xx answer is a *StatusError, which carries the receiver's
// Retry-After and its RFC 9457 problem detail when it sent them. A
// message that can never be sent as is (no or bad URL, a header name or
// value HTTP cannot carry) fails Permanent without a request.
//
// A batch is sent with up to Config.MaxConcurrency requests in flight
// (shared by all Sends of one sender) on a keep-alive client, and the
// result is reported per message. Once 8 requests of a batch to one
// endpoint failed as an unavailable endpoint fails (no response, 429, 502,
// 503, 504) and none succeeded, the rest of the batch to that endpoint is
// not sent and fails Transient: a down endpoint costs a batch about 8 +
// MaxConcurrency requests, not one per message. A 500 does not count
// towards this: it is the receiver failing that request.
//
// The relay keys its circuit breaker by the endpoint's scheme, host and
// path ([Sender.Destination]). The webhook sender never marks a failure
// [github.com/txbox/txbox/sender.Disconnected]: every endpoint is its own
// destination, with no connection shared by all routes.
package webhook
