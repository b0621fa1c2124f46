// Package webhook is the receiving end of txbox's webhook sender: an
// http.Handler that verifies the HMAC signature (when a secret is
// configured), reads the event id from the Idempotency-Key (or
// txbox-event-id) header, and runs the request through an inbox.
//
// Status codes tell the sender what to do:
//
//   - 200 when the event was processed or is a duplicate (the sender acks);
//   - 4xx with a problem-details JSON body (RFC 9457) for a request that a
//     retry cannot fix: wrong method, no or malformed id, bad or missing
//     signature, body too large;
//   - 422 when the handler returned an error marked txbox.Permanent (a
//     poison event): the sender counts an attempt and eventually
//     dead-letters it;
//   - 500 when the handler (or the inbox table) failed otherwise: nothing
//     was recorded, and the sender retries. The webhook sender reads a 5xx
//     as an outage of the destination (circuit open, no attempt counted),
//     so a handler that can never process an event should return
//     txbox.Permanent(err).
package webhook
