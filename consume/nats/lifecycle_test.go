package nats_test

import (
	"context"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestLifecycle: Start, Stop, Started and Stopped on JetStream, as the
// relay has them, pulling on demand and streamed; a closed connection
// stops the consumer by itself with the pull's fatal error (streamed:
// the iterator closed under it).
func TestLifecycle(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		buf   int
		fatal error
	}{{"OnDemand", 0, natsgo.ErrConnectionClosed}, {"Streamed", 4, jetstream.ErrMsgIteratorClosed}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			consumetest.RunLifecycle(t, func(t *testing.T, in *inbox.Inbox, h inbox.Handler) consumetest.Subject {
				js, subject, jc := stream(t)
				// The consumer's own connection, for Break to close.
				own := natstest.JetStream(t, testenv.NATSURL)
				oc, err := own.Consumer(context.Background(), jc.CachedInfo().Stream, jc.CachedInfo().Name)
				if err != nil {
					t.Fatal(err)
				}
				cons, err := cnats.New(oc, cnats.Config{Inbox: in, Handler: h, PullMaxMessages: mode.buf})
				if err != nil {
					t.Fatal(err)
				}
				return consumetest.Subject{
					Consumer: cons,
					Publish:  func(id txbox.ID) { publish(t, js, subject, id, false) },
					Break:    own.Conn().Close,
					Fatal:    mode.fatal,
				}
			})
		})
	}
}
