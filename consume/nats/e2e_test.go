package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
)

// TestEndToEnd runs the end-to-end scenario (consumetest.RunEndToEnd)
// through NATS JetStream and consume/nats; the events delivered again by
// hand are re-published without Nats-Msg-Id (so JetStream cannot drop
// them).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	snd, err := natssender.New(natssender.Config{URL: testenv.NATSURL, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := consumetest.NewPipeline(t, "nats-e2e")
	p.RunEndToEnd(t, consumetest.EndToEnd{
		Sender: snd,
		Route:  sender.Route{Subject: subject},
		Consumer: func() func(context.Context) error {
			cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: p.Handler, Concurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			return cons.Run
		},
		Redeliver: func(ids []txbox.ID) {
			for _, id := range ids {
				m := natsgo.NewMsg(subject)
				m.Data = []byte(`{"redelivered":true}`)
				m.Header.Set(txbox.HeaderEventID, id.String())
				if _, err := js.PublishMsg(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}
