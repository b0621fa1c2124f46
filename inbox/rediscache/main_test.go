package rediscache_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a closed cache and its client must leave nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
