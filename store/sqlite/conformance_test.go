package sqlite_test

import (
	"testing"

	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, storeharness.SQLite())
}

// TestRedriveConformance runs the redrive suite (store.OutboxRedriver).
func TestRedriveConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseRedrive(t, storeharness.SQLite())
}

// TestFanoutConformance runs the fan-out suite (store.Expander, route
// claims).
func TestFanoutConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseFanout(t, storeharness.SQLite())
}

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	inboxtest.ExerciseStore(t, storeharness.SQLiteInbox())
}

// TestInboxHelperProcess is the second process of TestInboxConformance's
// concurrent-duplicates test; it does nothing in a normal run.
func TestInboxHelperProcess(t *testing.T) {
	inboxtest.HelperProcess(t, storeharness.SQLiteInbox())
}
