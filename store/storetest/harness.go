package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store"
)

// Harness adapts one dialect to the outbox suite ([Exercise]). Every
// function must use the real database and isolate each namespace from
// every other.
type Harness struct {
	// NewNamespace creates an isolated, empty namespace (a PostgreSQL
	// schema, a MySQL database, a SQLite file) that is dropped when t ends,
	// and returns a handle Open understands.
	NewNamespace func(t *testing.T) string
	// Open opens a driver on namespace ns with the given table prefix
	// (empty = default). It does not migrate. It returns the driver
	// constructor's error unchanged for an invalid prefix. The driver is
	// closed when t ends.
	Open func(t *testing.T, ns, prefix string) (store.Driver, error)
	// Begin starts a transaction on d's database, of a type d's
	// OutboxInsert accepts.
	Begin func(t *testing.T, d store.Driver) Tx
	// Tables lists the table names in namespace ns, sorted.
	Tables func(t *testing.T, ns string) []string
	// OutboxLastError returns the last_error column of the outbox row id
	// ("" when NULL or when there is no such row): a column the store seam
	// does not read back, which the suite checks after finishes and
	// dead-letter retries.
	OutboxLastError func(t *testing.T, d store.Driver, id txbox.ID) string
	// WaitHorizon, when the dialect has a commit horizon for ordered
	// claims (PostgreSQL), waits until every transaction committed so far
	// is below it, so an ordered claim right after sees its rows. Nil
	// for dialects without one.
	WaitHorizon func(t *testing.T, d store.Driver)
	// WaitFence is the former name of WaitHorizon, used when WaitHorizon
	// is nil.
	//
	// Deprecated: use WaitHorizon.
	WaitFence func(t *testing.T, d store.Driver)
	// SerialWriter is true for dialects with one writer at a time
	// (SQLite): the suite still claims concurrently and checks exclusivity.
	SerialWriter bool
}

// Tx is a transaction opened by Harness.Begin.
type Tx interface {
	// Native is what OutboxInsert takes (pgx.Tx, *sql.Tx).
	Native() any
	Commit() error
	Rollback() error
}

// InboxHarnessEnv is the environment variable that tells the child process
// started by [ExerciseInbox] which InboxHarness (by Name) to use.
const InboxHarnessEnv = "TXBOX_STORETEST_INBOX_HARNESS"

// InboxStore is what the inbox suite needs from a dialect: the inbox
// queries and the leases the Cleaner uses.
type InboxStore interface {
	store.Inbox
	store.Leases
}

// InboxHarness adapts one dialect to the inbox suite ([ExerciseInbox]) and to the
// cache contract of inbox/inboxtest. Every function uses the real
// database.
type InboxHarness struct {
	// Name identifies the harness to the child process of the
	// concurrency test, which receives it in InboxHarnessEnv, so that one
	// test binary can run the suite for several dialects.
	Name string
	// NewNamespace creates an isolated namespace (a schema, a database, a
	// SQLite file) that is dropped when t ends and returns a handle that
	// Open understands, in this process and in a child process.
	NewNamespace func(t testing.TB) string
	// Open opens a migrated store on ns, closed when t ends.
	Open func(t testing.TB, ns string) InboxStore
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
func (h InboxHarness) Setup(t testing.TB) (ns string, st InboxStore) {
	t.Helper()
	ns = h.NewNamespace(t)
	st = h.Open(t, ns)
	h.CreateEffectTable(t, ns)
	return ns, st
}

// EffectHandler returns an inbox handler whose effect is one inbox_effect
// row (consumer, message id) in ns, written through the handler's
// transaction.
func (h InboxHarness) EffectHandler(ns, consumer string) inbox.Handler {
	return func(ctx context.Context, tx any, m inbox.Message) error {
		return h.InsertEffect(ctx, tx, ns, consumer, m.ID)
	}
}

// ExpectEffects fails t unless consumer's effect rows in ns are exactly
// want (rows per id).
func (h InboxHarness) ExpectEffects(t testing.TB, ns, consumer string, want map[txbox.ID]int) {
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
