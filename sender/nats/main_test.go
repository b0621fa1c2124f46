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
		// toxiproxy v2.5: cutting a connection (sendertest.Proxy.Down)
		// while a latency toxic holds data strands the toxic's goroutine.
		// TestConnectionCutMidBatch does exactly that, on purpose.
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*LatencyToxic).Pipe"),
	)
}
