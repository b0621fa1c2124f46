package relay_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/storeharness"
)

// TestMain fails the package when any goroutine outlives the tests: every
// relay is stopped and every pool closed by the tests' cleanups, so a
// leftover goroutine is a relay leak. The admin handles storeharness
// shares for the whole process are closed before goleak looks.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.RunThen(m, storeharness.CloseShared))
}
