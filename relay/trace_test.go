package relay_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	consumewebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// TestOneTraceFromPublishThroughRelayToConsumer publishes inside a
// producer span, relays over the webhook sender to the webhook consumer
// adapter, and finds one trace in the SDK's in-memory exporter: producer
// → relay message span → the consumer's handler span, with the relay's
// batch span linked to the producer.
func TestOneTraceFromPublishThroughRelayToConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("test")

	in, err := inbox.New(b.store, inbox.Config{Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan trace.SpanContext, 1)
	consumer, err := consumewebhook.New(consumewebhook.Config{Inbox: in, Logger: quietLogger(),
		Handler: func(ctx context.Context, _ any, _ inbox.Message) error {
			_, span := tracer.Start(ctx, "handle order")
			handled <- span.SpanContext()
			span.End()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(consumer)
	t.Cleanup(srv.Close)
	wh, err := webhook.New(webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wh.Close(context.Background()) })
	b.start(t, func(c *relay.Config) {
		c.Senders = map[string]sender.Sender{"hooks": wh}
		c.Defaults.Route = &sender.Route{URL: srv.URL + "/orders"}
		c.TracerProvider = tp
	})

	pub, err := outbox.NewPublisher(b.store, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, producer := tracer.Start(context.Background(), "place order")
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, tx, txbox.Event{Type: "order.placed", Payload: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	producer.End()

	var consumed trace.SpanContext
	select {
	case consumed = <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("not consumed within 30s")
	}
	var batch, send, handle tracetest.SpanStub
	testenv.WaitFor(t, 10*time.Second, "the relay's spans exported", func() bool {
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "txbox relay order.placed":
				batch = s
			case "send order.placed":
				send = s
			case "handle order":
				handle = s
			}
		}
		return batch.Name != "" && send.Name != "" && handle.Name != ""
	})
	traceID := producer.SpanContext().TraceID()
	if send.SpanContext.TraceID() != traceID || send.Parent.SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("relay message span is not the producer's child: trace %s parent %s, producer %s/%s",
			send.SpanContext.TraceID(), send.Parent.SpanID(), traceID, producer.SpanContext().SpanID())
	}
	if consumed.TraceID() != traceID || handle.Parent.SpanID() != send.SpanContext.SpanID() {
		t.Errorf("consumer span is not the relay message span's child: trace %s parent %s, send span %s",
			consumed.TraceID(), handle.Parent.SpanID(), send.SpanContext.SpanID())
	}
	if len(batch.Links) != 1 || batch.Links[0].SpanContext.SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("batch span links %+v, want the producer's span", batch.Links)
	}
	if batch.SpanKind != trace.SpanKindProducer || send.SpanKind != trace.SpanKindProducer {
		t.Errorf("span kinds %s, %s", batch.SpanKind, send.SpanKind)
	}
	attrs := map[string]string{}
	for _, a := range send.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["messaging.system"] != "txbox" || attrs["txbox.event_type"] != "order.placed" || attrs["messaging.message.id"] == "" {
		t.Errorf("send span attributes %v", attrs)
	}
}
