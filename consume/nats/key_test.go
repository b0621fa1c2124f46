package nats_test

import (
	"context"
	"testing"

	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
)

// TestKeyConformance: through NATS JetStream, in the headers and the
// CloudEvents format, inbox.Message.Key is the key each event was
// published with (the txbox-key header, the ce-subject attribute), and ""
// for an event without one (consumetest.RunKeyRoundTrip).
func TestKeyConformance(t *testing.T) {
	t.Parallel()
	for _, format := range []sender.Format{sender.FormatTxbox, sender.FormatCloudEvents} {
		t.Run(string(format), func(t *testing.T) {
			t.Parallel()
			_, subject, jc := stream(t)
			p := consumetest.NewPipeline(t, "nats-key")
			check := p.Keys()
			snd, err := natssender.New(natssender.Config{URL: testenv.NATSURL})
			if err != nil {
				t.Fatal(err)
			}
			cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: check.Handler})
			if err != nil {
				t.Fatal(err)
			}
			p.RunKeyRoundTrip(t, snd, sender.Route{Subject: subject, Format: format}, check, func(ctx context.Context) error { return cons.Run(ctx) })
		})
	}
}
