// Package ordertrace sets up OpenTelemetry for the orders example's
// services, the way an instrumented service would: when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, spans go over OTLP/HTTP to that
// collector (the exporter reads the other OTEL_EXPORTER_OTLP_ variables
// too); otherwise the tracer does nothing and costs nothing. The producer
// publishes inside its request span, so the event carries its
// traceparent; the relay (txbox relay with the same variables) continues
// the trace, and the consumer's span continues the relay's: one order,
// one trace across the three processes (docs/operations.md, "Tracing").
package ordertrace

import (
	"context"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Start returns the tracer of service and the function that flushes its
// spans at exit.
func Start(ctx context.Context, service string, log *slog.Logger) (trace.Tracer, func(), error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop.NewTracerProvider().Tracer(service), func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)), resource.WithFromEnv())
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing to OTLP", "service", service)
	return tp.Tracer(service), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("flushing spans failed", "err", err)
		}
	}, nil
}
