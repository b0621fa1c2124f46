package relay

import (
	"context"

	otelattr "go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// tracerName names the relay's tracer (its instrumentation scope).
const tracerName = "github.com/txbox/txbox/relay"

// batchTrace holds the spans of one batch being sent: the batch's, and
// one per message.
type batchTrace struct {
	ctx   context.Context // carries the batch span
	batch trace.Span
	msgs  []trace.Span
}

// startTrace starts the spans of a batch about to be sent and points each
// message's traceparent at its own span, so that the consumer's handler
// continues the trace publish → relay → consumer. The batch span cannot
// have every producer as its parent, so it links to them instead. It
// returns nil when tracing is off (no Config.TracerProvider).
func (l *lane) startTrace(msgs []*sender.Message) *batchTrace {
	if l.deps.tracer == nil {
		return nil
	}
	prop := propagation.TraceContext{}
	producers := make([]trace.SpanContext, len(msgs))
	links := make([]trace.Link, 0, len(msgs))
	for i, m := range msgs {
		producers[i] = trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(m.Headers)))
		if producers[i].IsValid() {
			links = append(links, trace.Link{SpanContext: producers[i]})
		}
	}
	common := []otelattr.KeyValue{
		otelattr.String("messaging.system", "txbox"),
		otelattr.String("messaging.destination.name", l.dest),
		otelattr.String("txbox.event_type", l.s.eventType),
		otelattr.String("txbox.sender", l.s.senderName),
	}
	ctx, batch := l.deps.tracer.Start(l.deps.hard, "txbox relay "+l.s.eventType,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(append(common, otelattr.Int("messaging.batch.message_count", len(msgs)))...))
	bt := &batchTrace{ctx: ctx, batch: batch, msgs: make([]trace.Span, len(msgs))}
	for i, m := range msgs {
		parent := context.Background()
		if producers[i].IsValid() {
			parent = trace.ContextWithRemoteSpanContext(parent, producers[i])
		}
		_, span := l.deps.tracer.Start(parent, "send "+l.s.eventType, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithLinks(trace.Link{SpanContext: batch.SpanContext()}),
			trace.WithAttributes(append(common, otelattr.String("messaging.message.id", m.ID.String()),
				otelattr.Int("txbox.attempt", m.Attempt))...))
		bt.msgs[i] = span
		// The message's headers are its own copy (messages()): replace
		// the producer's context with this span's.
		delete(m.Headers, txbox.HeaderTraceParent)
		delete(m.Headers, "tracestate")
		prop.Inject(trace.ContextWithSpan(context.Background(), span), propagation.MapCarrier(m.Headers))
	}
	return bt
}

// end ends the spans with each message's result.
func (bt *batchTrace) end(sent sendResult) {
	if bt == nil {
		return
	}
	failed := 0
	for i, span := range bt.msgs {
		if err := sent.results[i]; err != nil {
			failed++
			span.RecordError(err)
			span.SetStatus(codes.Error, sent.classes[i].String())
		}
		span.End()
	}
	if failed > 0 {
		bt.batch.SetStatus(codes.Error, "some messages were not acknowledged")
	}
	bt.batch.SetAttributes(otelattr.Int("txbox.failed", failed), otelattr.Bool("txbox.stopped", sent.stopped))
	bt.batch.End()
}
