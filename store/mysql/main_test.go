package mysql_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

// TestMain fails the package when a goroutine outlives the tests: a
// closed store must leave nothing running.
// The admin handles storeharness shares for the whole process are closed
// before goleak looks.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.RunThen(m, storeharness.CloseShared))
}
