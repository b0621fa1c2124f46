// Package inboxtest is the cache contract: it checks an inbox.Cache
// through the real inbox.Inbox in front of a real store, [ExerciseCache]: a hit
// answers Duplicate without touching the table, a miss goes to the table,
// entries are written only after a commit and are namespaced by consumer,
// a cache TTL above the inbox TTL is refused, and emptying the cache in the
// middle of a run of redeliveries costs lookups, never a second effect.
// Its tests run the contract for the LRU in front of every dialect and for
// Redis (inbox/rediscache), and check the inbox's behaviour with caches
// and typed handlers on PostgreSQL: what a duplicate costs with and
// without a cache, Redis being down, inbox.Typed.
//
// A cache implementation wires it with one test function, on any dialect's
// storetest.InboxHarness (txbox's own tests take theirs from
// internal/storeharness, one per dialect; a cache outside this module
// fills in storetest.InboxHarness for the database it runs on):
//
//	func TestCache(t *testing.T) { inboxtest.ExerciseCache(t, harness, newCache) }
//
// What a dialect's store.Inbox must do (duplicates, rollback with the
// handler's effect, concurrency across processes, cleanup) is the inbox
// suite of store/storetest, which every dialect's own tests run.
package inboxtest
