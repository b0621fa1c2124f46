package consume_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every consumer's Run has returned and every pool is closed by the tests' cleanups, so a leftover goroutine is a leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
