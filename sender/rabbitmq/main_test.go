package rabbitmq_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a
// closed sender must leave nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
