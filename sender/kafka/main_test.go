package kafka_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: a
// closed sender must leave nothing running. The one goroutine ignored is
// the process-wide meter ticker of go-metrics, which sarama (the
// CloudEvents SDK's Kafka binding, in TestCloudEventsReadBySDK) starts
// once and never stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}
