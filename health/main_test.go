package health_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// TestMain fails the package when a goroutine outlives the tests: every
// relay and server the tests start is stopped by their cleanups.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.RunThen(m, storeharness.CloseShared))
}
