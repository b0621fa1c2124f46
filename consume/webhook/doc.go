// Package webhook is the receiving end of txbox's webhook sender: an
// http.Handler that verifies the HMAC signature (when a secret is
// configured), reads the event id from the Idempotency-Key (or
// txbox-event-id) header, or from the id attribute of a CloudEvent (ce-id
// in binary mode, the application/cloudevents+json envelope in structured
// mode; docs/cloudevents.md), and the key (inbox.Message.Key) from the
// txbox-key header or the subject attribute, and runs the request through
// an inbox.
//
// Status codes tell the sender what to do:
//
//   - 200 when the event was processed or is a duplicate (the sender acks),
//     and, in non-transactional mode, when the handler failed after the id
//     was recorded ({"result":"lost"}: a retry would be a duplicate; the
//     inbox logs the lost effect at ERROR and reports it to its Hook);
//   - 4xx with a problem-details JSON body (RFC 9457) for a request that a
//     retry cannot fix: wrong method, no or malformed id, bad or missing
//     signature, body too large;
//   - 422 when the handler returned an error marked txbox.Permanent (a
//     poison event): the webhook sender reads it as a rejection, never
//     as an outage: the relay counts an attempt and dead-letters the event
//     after max attempts;
//   - 503 when this consumer cannot process anything right now: its inbox
//     store failed (down, unreachable, a failed commit), or the handler
//     returned an error marked txbox.Transient (its own dependencies are
//     down). Nothing was recorded; the sender retries;
//   - 500 when the handler failed this event otherwise. Nothing was
//     recorded; the sender retries.
//
// Every error response has a problem-details JSON body (RFC 9457,
// application/problem+json), whose type tells the cases apart.
//
// The webhook sender classifies every 5xx as transient. Whether that
// counts an attempt is the relay's decision, by destination: while the
// receiver accepts other events, a message that keeps failing with 500
// counts its attempts and ends in the dead-letter table; only while the
// destination as a whole fails are attempts left alone
// (docs/concepts.md). A handler that knows an event can never be
// processed should still return txbox.Permanent(err): a 422 is never
// mistaken for an outage, whatever the other events do.
//
// Stopping: serve the Handler from an http.Server and stop it with
// Shutdown(ctx), which takes no new connection and waits for the requests
// in flight (their context is not cancelled, so a running handler
// commits); when ctx ends first, Close cancels them. See docs/inbox.md.
package webhook
