package sender_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a Gate whose Sends left must leave no waiter behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
