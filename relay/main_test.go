package relay_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// TestMain fails the package when any goroutine outlives the tests: every
// relay is stopped and every pool closed by the tests' cleanups, so a
// leftover goroutine is a relay leak. The shared handles of
// internal/storeharness (the commit horizon tests' dialects) are closed
// first.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.RunThen(m, storeharness.CloseShared))
}
