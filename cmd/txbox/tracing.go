package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/credentials"

	"github.com/txbox/txbox/config"
)

// tracingFlushTimeout bounds the flush of the spans still queued when the
// relay stops: a collector that does not answer must not hold the exit.
const tracingFlushTimeout = 10 * time.Second

// startTracing builds the OTLP exporter and the tracer provider the relay
// traces its deliveries with (relay.Config.TracerProvider), from the
// tracing block and the OTEL_ variables (docs/operations.md, "Tracing").
// It returns a nil provider when tracing is off. The exporter connects
// lazily: a collector that is down costs dropped spans (logged), never a
// relay that does not start. shutdown flushes the queued spans; call it
// after the relay stopped, so the last batches' spans go out too.
func startTracing(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger) (tp *sdktrace.TracerProvider, shutdown func(context.Context), err error) {
	x, err := cfg.TracingExport(getenv, log)
	if err != nil || x == nil {
		return nil, func(context.Context) {}, err
	}
	exp, err := newExporter(ctx, x)
	if err != nil {
		return nil, nil, err
	}
	res, err := tracingResource(ctx, x.ServiceName)
	if err != nil {
		return nil, nil, err
	}
	// Export failures are the collector's problem, not the relay's: log
	// them (the exporter's errors name the endpoint, not the headers).
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed; spans dropped", "error", err)
	}))
	tp = sdktrace.NewTracerProvider(
		// The batcher's queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE, 2048 by
		// default): when the collector lags, spans are dropped, memory
		// stays flat.
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(newSampler(x.Sampler, x.SamplerRatio)),
	)
	log.Info("tracing: exporting spans over OTLP", "protocol", x.Protocol, "endpoint", endpointForLog(x.Endpoint), "sampler", x.Sampler)
	return tp, func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing the last spans failed", "error", err)
		}
	}, nil
}

// newExporter returns the OTLP exporter of x's protocol. Options set only
// what the tracing block set, so the exporter's own OTEL_EXPORTER_OTLP_
// variables apply to the rest.
func newExporter(ctx context.Context, x *config.TracingExport) (sdktrace.SpanExporter, error) {
	if x.Protocol == config.TracingGRPC {
		var opts []otlptracegrpc.Option
		if x.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(x.Endpoint))
		}
		if x.Headers != nil {
			opts = append(opts, otlptracegrpc.WithHeaders(x.Headers))
		}
		if x.TLS != nil {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(x.TLS)))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: grpc exporter: %w", err)
		}
		return exp, nil
	}
	var opts []otlptracehttp.Option
	if x.Endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(withTracesPath(x.Endpoint)))
	}
	if x.Headers != nil {
		opts = append(opts, otlptracehttp.WithHeaders(x.Headers))
	}
	if x.TLS != nil {
		opts = append(opts, otlptracehttp.WithTLSClientConfig(x.TLS))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: http exporter: %w", err)
	}
	return exp, nil
}

// withTracesPath gives an endpoint URL without a path the OTLP/HTTP
// traces path, as OTEL_EXPORTER_OTLP_ENDPOINT does: the exporter takes a
// URL option's path as it is.
func withTracesPath(endpoint string) string {
	u, err := url.Parse(endpoint) // validated at load
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// endpointForLog is the endpoint as the log shows it.
func endpointForLog(endpoint string) string {
	if endpoint == "" {
		return "(OTEL_EXPORTER_OTLP_ENDPOINT or the exporter's default)"
	}
	return endpoint
}

// tracingResource describes the relay: service.name (the file's, else
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES, else txbox) and the
// txbox version. Later detectors win.
func tracingResource(ctx context.Context, serviceName string) (*resource.Resource, error) {
	opts := []resource.Option{
		resource.WithAttributes(attribute.String("service.name", config.DefaultTracingServiceName),
			attribute.String("service.version", versionString())),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	}
	if serviceName != "" {
		opts = append(opts, resource.WithAttributes(attribute.String("service.name", serviceName)))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return res, nil
}

// newSampler maps a resolved OTEL_TRACES_SAMPLER name to the SDK's.
func newSampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}
