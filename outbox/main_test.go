package outbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a publisher starts nothing; the stores the tests open are closed by their cleanups.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
