package inboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store"
)

// HarnessEnv is the environment variable that tells the child process
// started by [ExerciseStore] which Harness (by Name) to use.
const HarnessEnv = "TXBOX_INBOXTEST_HARNESS"

// Store is what both suites need from a dialect: the inbox queries
// and the leases the Cleaner uses.
type Store interface {
	store.Inbox
	store.Leases
}

// Harness adapts one dialect to the store suite ([ExerciseStore]) and to
// the cache contract ([ExerciseCache]). Every function uses the real
// database.
type Harness struct {
	// Name identifies the harness to the child process of the
	// concurrency test, which receives it in HarnessEnv, so that one
	// test binary can run the suite for several dialects.
	Name string
	// NewNamespace creates an isolated namespace (a schema, a database, a
	// SQLite file) that is dropped when t ends and returns a handle that
	// Open understands, in this process and in a child process.
	NewNamespace func(t testing.TB) string
	// Open opens a migrated store on ns, closed when t ends.
	Open func(t testing.TB, ns string) Store
	// CreateEffectTable creates the table inbox_effect(consumer text,
	// event_id text) in ns, with no unique key, so that a second effect
	// shows up as a second row.
	CreateEffectTable func(t testing.TB, ns string)
	// InsertEffect inserts (consumer, id) into ns's inbox_effect through
	// tx, the transaction an inbox handler received.
	InsertEffect func(ctx context.Context, tx any, ns, consumer string, id txbox.ID) error
	// CountEffects returns the number of effect rows per id of consumer.
	CountEffects func(t testing.TB, ns, consumer string) map[txbox.ID]int
	// CountInbox returns the number of inbox rows of consumer.
	CountInbox func(t testing.TB, ns, consumer string) int
	// AgeInbox moves the processed_at of consumer's id back by age, on the
	// database clock.
	AgeInbox func(t testing.TB, ns, consumer string, id txbox.ID, age time.Duration)
}

// Setup creates a namespace, opens a migrated store on it and creates the
// effect table: where every inbox test starts.
func (h Harness) Setup(t testing.TB) (ns string, st Store) {
	t.Helper()
	ns = h.NewNamespace(t)
	st = h.Open(t, ns)
	h.CreateEffectTable(t, ns)
	return ns, st
}

// EffectHandler returns an inbox handler whose effect is one inbox_effect
// row (consumer, message id) in ns, written through the handler's
// transaction.
func (h Harness) EffectHandler(ns, consumer string) inbox.Handler {
	return func(ctx context.Context, tx any, m inbox.Message) error {
		return h.InsertEffect(ctx, tx, ns, consumer, m.ID)
	}
}

// ExpectEffects fails t unless consumer's effect rows in ns are exactly
// want (rows per id).
func (h Harness) ExpectEffects(t testing.TB, ns, consumer string, want map[txbox.ID]int) {
	t.Helper()
	got := h.CountEffects(t, ns, consumer)
	for id, n := range want {
		if got[id] != n {
			t.Errorf("effects of %s: got %d, want %d", id, got[id], n)
		}
	}
	for id, n := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("unexpected effect of %s (%d rows)", id, n)
		}
	}
}
