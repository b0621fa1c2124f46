package inboxtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestMain fails the package when a goroutine outlives the tests: the
// stores and pools each dialect's harness opens are closed by the tests'
// cleanups.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.RunThen(m, func() {
		// The shared admin handle lives as long as the process: close
		// it before goleak looks.
		if pgAdminDB != nil {
			_ = pgAdminDB.Close()
		}
	}))
}

// TestInboxHelperProcess is the second process of the concurrent-duplicates
// test of every dialect; it does nothing in a normal run.
func TestInboxHelperProcess(t *testing.T) {
	inboxtest.HelperProcess(t, map[string]inboxtest.Harness{
		"postgres": pgHarness(),
		"sqlite":   sqliteHarness(),
		"mysql":    mysqlHarness(),
	})
}
