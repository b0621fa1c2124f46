package store_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: the store package's helpers start nothing.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
