package sendertest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: the suite's proxies, freezers and senders are closed by its cleanups.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
