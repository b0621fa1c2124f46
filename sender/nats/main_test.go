package nats_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every
// Sender, connection and proxy must be released by Close or cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55: CleanupPublisher (used by Close on a borrowed
		// connection) can strand this goroutine on a nil channel when it
		// runs before the goroutine started. Upstream race, not ours.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}
