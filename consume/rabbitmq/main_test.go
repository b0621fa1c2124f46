package rabbitmq_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a consumer whose Run returned, with its handlers and the test's connections closed, must leave nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
