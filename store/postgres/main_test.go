package postgres_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/txbox/txbox/internal/testenv"
)

// TestMain fails the package when a goroutine outlives the tests: a
// closed store (LISTEN, the wake-up fan-out, the pool) must leave nothing
// running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testenv.RunThen(m, func() {
		// The shared admin handle lives as long as the process: close
		// it before goleak looks.
		if adminDB != nil {
			_ = adminDB.Close()
		}
	}))
}
