package inboxtest_test

import (
	"testing"

	"github.com/txbox/txbox/inbox/inboxtest"
)

// TestInboxHelperProcess is the second process of the concurrent-duplicates
// test of every dialect; it does nothing in a normal run.
func TestInboxHelperProcess(t *testing.T) {
	inboxtest.HelperProcess(t, map[string]inboxtest.Harness{
		"postgres": pgHarness(),
		"sqlite":   sqliteHarness(),
		"mysql":    mysqlHarness(),
	})
}
