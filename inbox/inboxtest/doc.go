// Package inboxtest holds the inbox's two conformance suites, both run
// through the real inbox.Inbox in front of a real store and both set up
// with a [Harness] that adapts one dialect (txbox's own tests take theirs
// from internal/storeharness, one per dialect; a dialect or a cache outside
// this module fills in a Harness for the database it runs on).
//
// The store suite, [ExerciseStore], is what a dialect's store.Inbox must
// do. It drives the store through inbox.Inbox and inbox.Cleaner, the
// seam's only clients, and checks each outcome in the tables: duplicate
// suppression per consumer, rollback of the id with the handler's effect
// on error and panic, at-most-once non-transactional mode, batches, the
// caller's own transaction, hostile consumer names, concurrent duplicates
// from 16 goroutines and a second OS process, overlapping concurrent
// batches, TTL cleanup on both sides of the boundary and the cleanup
// lease. It lives here rather than in store/storetest, the rest of the
// store's suite, because it is built on the inbox, a layer above the
// store. Each dialect's tests run it with two functions:
//
//	func TestInboxConformance(t *testing.T) {
//		inboxtest.ExerciseStore(t, inboxHarness())
//	}
//	func TestInboxHelperProcess(t *testing.T) {
//		inboxtest.HelperProcess(t, inboxHarness())
//	}
//
// The second is the entry point of the child process that ExerciseStore
// re-executes (the test binary itself) for its concurrent-duplicates test;
// it returns at once in a normal run.
//
// The cache contract, [ExerciseCache], checks an inbox.Cache: a hit
// answers Duplicate without touching the table, a miss goes to the table,
// entries are written only after a commit and are namespaced by consumer,
// a cache TTL above the inbox TTL is refused, and emptying the cache in the
// middle of a run of redeliveries costs lookups, never a second effect. A
// cache implementation wires it with one test function, on any dialect's
// harness:
//
//	func TestCache(t *testing.T) { inboxtest.ExerciseCache(t, harness, newCache) }
//
// The package's own tests run the contract for the LRU in front of every
// dialect and for Redis (inbox/rediscache), and check the inbox's
// behaviour with caches and typed handlers on PostgreSQL: what a duplicate
// costs with and without a cache, Redis being down, inbox.Typed.
//
// Boundaries are checked on both sides without sleeping "long enough": the
// early side is asserted only when the clock proves the boundary had not
// passed, and the late side is polled with a deadline.
package inboxtest
