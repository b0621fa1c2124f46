// Package storetest is the conformance suite every store dialect runs, in
// the spirit of River's riverdrivertest. Each dialect's tests call its
// entry points, [Exercise] (the outbox, dead letters, leases, migrations)
// and, for a dialect with a lock claim (store.OutboxLocker),
// [ExerciseLock], and [ExerciseRedrive] (store.OutboxRedriver, the redrive
// of kept events), with a harness that opens stores on isolated namespaces
// of the real database (a dialect outside this module writes its own
// [Harness]; txbox's three have theirs in internal/storeharness):
//
//	func TestConformance(t *testing.T) { storetest.Exercise(t, harness()) }
//
// The store.Inbox half of the seam has its suite in inbox/inboxtest
// (inboxtest.ExerciseStore): it drives the store through the real
// inbox.Inbox, which is built on this layer, so it lives in the inbox's.
// The files follow the areas of the seam: insert, claim, finish, dead
// letters, cleanup and leases, migrations and identifiers, ordering.
//
// Every outbox subtest runs in parallel in a fresh namespace and uses only
// the store.Driver seam (plus Harness.OutboxLastError, to read back a
// column the seam does not return), so what it checks is the contract the
// relay, the publisher and the admin API rely on:
//
//   - publishing joins the caller's transaction (visible on commit, never
//     claimable after rollback, refused without a transaction), stores
//     hostile keys, headers and payloads verbatim, and inserts batches;
//   - claims return due PENDING rows of one type in (due_at, id) order, at
//     most Limit, never before not-before, never the same row to two of 8
//     concurrent claimers; bad parameters (Limit < 1, a zero lease, an
//     invalid event type) are errors;
//   - leases expire on the database clock (not before, yes after), recovery
//     counts no attempt, and a finish with a stale or wrong lease token
//     changes nothing and is counted as fenced;
//   - retry (attempts+1, due later, last error), release (attempts kept),
//     failure, delete on ack; error texts with NUL and invalid UTF-8 stored
//     sanitised (store.SanitizeText) without failing the finish; the
//     dead-letter move (also with 4 concurrent movers), failed_at = when
//     the row failed, retry back to the outbox with the same id and its
//     last error (an id already in the outbox stays), resolve, delete,
//     list filters (FailedAfter inclusive, FailedBefore exclusive), count
//     and keyset cursor;
//   - cleanup TTL boundaries and batch limits for processed rows and
//     resolved dead letters; the cleanup lease (one holder, renewal,
//     release, expiry);
//   - migrations applied concurrently and twice; hostile table prefixes
//     rejected with txbox.ErrInvalidIdentifier and the namespace unchanged;
//   - ordered-by-key claims: only each key's head, retries keep their
//     place, a dead-lettered head parks its key until resolved or retried,
//     and under 8 concurrent claimers no key ever has two rows in flight;
//   - per-type stats and the pending-types discovery.
//
// Boundaries are checked on both sides without sleeping "long enough": the
// early side is asserted only when the clock proves the boundary had not
// passed, and the late side is polled with a deadline.
package storetest
