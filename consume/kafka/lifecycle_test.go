package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
)

// TestLifecycle: Start, Stop, Started and Stopped on kfake, as the relay
// has them; closing the client stops the consumer by itself, without an
// error.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	consumetest.RunLifecycle(t, func(t *testing.T, in *inbox.Inbox, h inbox.Handler) consumetest.Subject {
		c := cluster(t)
		cl := consumer(t, c, "g-life", kgo.DisableAutoCommit())
		cons, err := kafka.New(cl, kafka.Config{Inbox: in, Handler: h})
		if err != nil {
			t.Fatal(err)
		}
		return consumetest.Subject{
			Consumer: cons,
			Publish:  func(id txbox.ID) { produce(t, c, []*kgo.Record{record(id)}) },
			Break:    cl.Close,
		}
	})
}
