package inboxprom_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: the metrics hook starts nothing of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
