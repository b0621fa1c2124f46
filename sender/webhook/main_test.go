package webhook_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every
// Sender, connection and proxy must be released by Close or cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
