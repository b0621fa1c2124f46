// Package inboxtest is the conformance suite every dialect's store.Inbox
// runs, through the real inbox.Inbox, against the real database: duplicate
// suppression, rollback of the id with the effect on error and panic,
// concurrent duplicates from 16 goroutines and a second OS process, batches,
// TTL cleanup on both sides of the boundary, the cleanup lease, hostile
// consumer names and the cache contract.
//
// A test package wires it with two test functions:
//
//	func TestInbox(t *testing.T) { inboxtest.Run(t, harness()) }
//	func TestInboxHelperProcess(t *testing.T) {
//		inboxtest.HelperProcess(t, map[string]inboxtest.Harness{"pg": harness()})
//	}
//
// The second is the entry point of the child process that Run re-executes
// (the test binary itself); it returns at once in a normal run.
package inboxtest
