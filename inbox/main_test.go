package inbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a stopped cleaner and a closed store must leave nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
