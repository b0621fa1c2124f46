package webhook_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a handler that was shut down, with its servers and clients closed, must leave nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
