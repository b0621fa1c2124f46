// Package sendertest is the conformance suite every txbox sender runs, in
// the spirit of watermill's tests.TestPubSub: one [Exercise] call drives a
// sender against its real destination and checks the promises the relay
// relies on.
//
//   - every message of a batch arrives once, with its payload, headers,
//     txbox-event-id and (when the destination carries one) key, and Send
//     reports success only for acknowledged messages;
//   - many messages are in flight at once: with latency injected between
//     the sender and the destination, a batch of M messages takes far less
//     than M round trips (a structural ratio, never an absolute speed);
//   - a message the destination refuses fails alone, classified Rejected
//     or Permanent, while the rest of its batch is acknowledged;
//   - an unreachable destination, or one that goes away, fails the whole
//     batch as Transient within a bound, and the sender recovers when the
//     destination comes back;
//   - those failures are marked sender.Disconnected exactly when the
//     sender claims connection semantics (Features.MarksDisconnected: one
//     broker connection behind all routes), and never otherwise;
//   - cancelling the context stops Send promptly, unacked messages failing
//     as Transient;
//   - Close waits for the Sends in flight, and Send after Close fails with
//     txbox.ErrClosed.
//
// A [Harness] adapts one sender: it creates a fresh, isolated destination
// (a stream, topic, queue or URL of its own), builds a sender that talks to
// it through a given address, reads back what arrived, and optionally
// poisons one message so the destination refuses it. Faults (latency, an
// outage) are injected by default with an in-process toxiproxy in front of
// the destination's address; a destination that cannot sit behind a plain
// TCP proxy supplies its own [Faults].
//
// A sender package runs it from a test of its own:
//
//	func TestConformance(t *testing.T) {
//		t.Parallel()
//		sendertest.Exercise(t, sendertest.Harness{
//			Features: sendertest.Features{SupportsPerMessageReject: true, SupportsKey: true},
//			NewDestination: func(t *testing.T) *sendertest.Destination {
//				q := newQueue(t) // unique, removed when t ends
//				return &sendertest.Destination{
//					Addr: "127.0.0.1:5672",
//					Connect: func(t *testing.T, addr string) (sender.Sender, sender.Route) {
//						return newSender(t, addr), sender.Route{RoutingKey: q.name}
//					},
//					Received: q.readAll,
//					Poison:   func(t *testing.T, m *sender.Message) { m.Route.RoutingKey = "unbound" },
//				}
//			},
//		})
//	}
//
// Beside the suite, a sender's own tests find the pieces they share here:
// [CheckHung] (a destination that stops answering without closing
// anything, through a [Freezer]), [WaitRecovered] (probing until a paused
// destination takes messages again) and [SendVsRaw] (the benchmark loop
// that sets the sender against the broker's own client).
//
// The checks never compare absolute speeds; the one timing bound that is
// not a ratio (Harness.UnreachableBound, and "promptly" = 2s after a
// cancel) is generous enough for a loaded machine under -race.
package sendertest
