package postgres_test

import (
	"testing"

	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store/storetest"
)

// Shorthands for the shared set-up of internal/storeharness.
var (
	// admin is a shared database/sql handle for schemas and inspection.
	admin = storeharness.PostgresAdmin
	// newPool opens a small pool closed when the test ends.
	newPool = storeharness.PostgresPool
	// newSchema creates a fresh schema dropped when the test ends.
	newSchema = storeharness.PostgresSchema
	// open returns a migrated driver on a fresh schema.
	open = storeharness.PostgresDriver
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, storeharness.Postgres())
}

// TestRedriveConformance runs the redrive suite (store.OutboxRedriver).
func TestRedriveConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseRedrive(t, storeharness.Postgres())
}

// TestLockConformance runs the lock claim suite (store.OutboxLocker).
func TestLockConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseLock(t, storeharness.Postgres())
}

// TestFanoutConformance runs the fan-out suite (store.Expander, claims by
// route).
func TestFanoutConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseFanout(t, storeharness.Postgres())
}

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	inboxtest.ExerciseStore(t, storeharness.PostgresInbox())
}

// TestInboxHelperProcess is the second process of TestInboxConformance's
// concurrent-duplicates test; it does nothing in a normal run.
func TestInboxHelperProcess(t *testing.T) {
	inboxtest.HelperProcess(t, storeharness.PostgresInbox())
}
