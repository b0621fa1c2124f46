package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any goroutine outlives the tests: every
// relay is stopped and every pool closed by the tests' cleanups, so a
// leftover goroutine is a relay leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
