package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/otlpreceiver"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/postgres"
)

// TestSubprocessRelayTracing runs `txbox relay` as a real process against
// PostgreSQL and NATS with a tracing block pointing at an in-process OTLP
// receiver, over each protocol, in plain text and over TLS with a private
// CA (tracing.tls.ca-file). Three events published inside producer
// spans must come back as one batch span linked to the three producer
// spans and one message span each, child of its producer's span, whose
// context is the traceparent the message carries on NATS. The export
// interval is ten minutes, so the spans can only reach the receiver
// through the flush at SIGTERM; the headers from headers-env reach it too
// and never the log.
func TestSubprocessRelayTracing(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		for _, tls := range []bool{false, true} {
			name := strings.ReplaceAll(protocol, "/", "-")
			if tls {
				name += "-tls"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				relayTracing(t, protocol, tls)
			})
		}
	}
}

// relayTracing is one protocol's run of TestSubprocessRelayTracing; with
// tls the collector is https:// with a private CA (tracing.tls.ca-file).
func relayTracing(t *testing.T, protocol string, tls bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recv := otlpreceiver.Start(t)
	endpoint, tlsBlock := map[[2]bool]string{
		{false, false}: recv.HTTPURL, {false, true}: recv.HTTPSURL,
		{true, false}: recv.GRPCURL, {true, true}: recv.GRPCSURL,
	}[[2]bool{protocol == "grpc", tls}], ""
	if tls {
		tlsBlock = fmt.Sprintf("  tls: { ca-file: %q }\n", recv.CAFile)
	}

	schema := storeharness.PostgresSchema(t)
	pool, err := pgxpool.New(ctx, testenv.PostgresURLWithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	stream, subj := testStream(t, ctx)

	// Three producers, each in a span of its own (an in-process SDK, as
	// an instrumented service has), in one transaction.
	producerTP := sdktrace.NewTracerProvider()
	defer func() { _ = producerTP.Shutdown(context.Background()) }()
	pub, err := outbox.NewTxPublisher(st.Pgx(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	producers := map[txbox.ID]trace.SpanContext{}
	for i := range 3 {
		pctx, span := producerTP.Tracer("test").Start(ctx, "create order")
		id, err := pub.PublishJSON(pctx, tx, "order-created", fmt.Sprint(i), map[string]int{"order": i})
		if err != nil {
			t.Fatal(err)
		}
		producers[id] = span.SpanContext()
		span.End()
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	const canary = "Canary-otlp-key-77z"
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	yml := fmt.Sprintf(`
database: { dialect: postgres, schema: %s }
senders:
  main: { type: nats, url: %q }
defaults:
  route: { subject: "%s.{event_type}" }
  polling: { min-delay: 10ms, max-delay: 200ms }
relay: { shutdown-timeout: 15s }
tracing:
  endpoint: %s
  protocol: %s
  headers-env: TXBOX_TEST_OTLP_HEADERS
  service-name: txbox-relay-test
%s`, schema, testenv.NATSURL, subj, endpoint, protocol, tlsBlock)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	relayCmd, relayOut, relayErr := child(t, ctx, "relay", "--config", cfgPath)
	relayCmd.Env = append(relayCmd.Env, "TXBOX_DATABASE_DSN="+testenv.PostgresURL,
		"TXBOX_TEST_OTLP_HEADERS=x-api-key="+canary+",x-tenant=acme",
		// No periodic export: only the flush at shutdown can deliver.
		"OTEL_BSP_SCHEDULE_DELAY=600000")
	exited := startChild(t, relayCmd)

	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	carried := map[txbox.ID]trace.SpanContext{} // the traceparent each message carries
	testenv.WaitFor(t, 60*time.Second, "the three events on the stream", func() bool {
		batch, err := cons.Fetch(3, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			id, err := txbox.ParseID(m.Headers().Get(txbox.HeaderEventID))
			if err != nil {
				t.Fatal(err)
			}
			hc := propagation.MapCarrier{txbox.HeaderTraceParent: m.Headers().Get(txbox.HeaderTraceParent)}
			carried[id] = trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), hc))
			_ = m.Ack()
		}
		select {
		case err := <-exited:
			t.Fatalf("relay exited early: %v\nstderr: %s", err, relayErr)
		default:
		}
		return len(carried) >= 3
	})
	if n := len(recv.Spans()); n != 0 {
		t.Fatalf("%d spans exported before the shutdown flush, with a ten-minute export interval", n)
	}

	sigterm(t, relayCmd, exited, 30*time.Second, relayErr)
	// The exit waited for the export: the spans are there now.
	spans := recv.Spans()
	byID := map[string]otlpreceiver.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
		if s.Service != "txbox-relay-test" {
			t.Errorf("span %q has service.name %q, want tracing.service-name", s.Name, s.Service)
		}
	}
	msgSpans := 0
	for _, s := range spans {
		if s.Name != "send order-created" {
			continue
		}
		msgSpans++
		id, err := txbox.ParseID(s.Attributes["messaging.message.id"])
		if err != nil {
			t.Fatalf("message span without an event id: %+v", s)
		}
		prod, ok := producers[id]
		if !ok {
			t.Fatalf("message span for unknown event %s", id)
		}
		if s.TraceID != prod.TraceID().String() || s.ParentSpanID != prod.SpanID().String() || s.Kind != "SPAN_KIND_PRODUCER" {
			t.Errorf("message span %+v does not continue its producer's span %s/%s", s, prod.TraceID(), prod.SpanID())
		}
		if c := carried[id]; c.SpanID().String() != s.SpanID || c.TraceID().String() != s.TraceID {
			t.Errorf("event %s carries traceparent %s/%s, want its message span %s/%s", id, c.TraceID(), c.SpanID(), s.TraceID, s.SpanID)
		}
		if len(s.Links) != 1 {
			t.Fatalf("message span links %v, want its batch span", s.Links)
		}
		b, ok := byID[s.Links[0].SpanID]
		if !ok || b.Name != "txbox relay order-created" {
			t.Fatalf("message span links to %+v, want the batch span", b)
		}
		linked := false
		for _, l := range b.Links {
			linked = linked || l.TraceID == prod.TraceID().String() && l.SpanID == prod.SpanID().String()
		}
		if !linked {
			t.Errorf("batch span %s does not link to the producer span of event %s (links %v)", b.SpanID, id, b.Links)
		}
	}
	t.Logf("%s (tls %v): %d spans received, %d message spans, %d export requests", protocol, tls, len(spans), msgSpans, len(recv.Requests()))
	if msgSpans != 3 {
		t.Fatalf("%d message spans received, want 3; spans: %+v\nrelay stderr: %s", msgSpans, spans, relayErr)
	}
	reqs := recv.Requests()
	if len(reqs) == 0 || reqs[0]["X-Api-Key"] != canary || reqs[0]["X-Tenant"] != "acme" {
		t.Errorf("export request headers %v lack the headers-env pairs", reqs)
	}
	if all := relayOut.String() + relayErr.String(); strings.Contains(all, canary) {
		t.Fatalf("the OTLP header's value leaked into the relay's output:\n%s", all)
	} else if !strings.Contains(all, "tracing: exporting spans over OTLP") {
		t.Errorf("the relay did not log its tracing set-up:\n%s", all)
	}
}

// The spans' service.name: the file's, else OTEL_SERVICE_NAME, else
// txbox. Not parallel: it sets the process environment.
func TestTracingResourceServiceName(t *testing.T) {
	ctx := context.Background()
	name := func(file string) string {
		t.Helper()
		res, err := tracingResource(ctx, file)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range res.Attributes() {
			if kv.Key == "service.name" {
				return kv.Value.AsString()
			}
		}
		return ""
	}
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	if got := name(""); got != "txbox" {
		t.Errorf("no name anywhere: %q, want txbox", got)
	}
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,deployment.environment=prod")
	if got := name(""); got != "from-attributes" {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q", got)
	}
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	if got := name(""); got != "from-env" {
		t.Errorf("OTEL_SERVICE_NAME: %q", got)
	}
	if got := name("from-file"); got != "from-file" {
		t.Errorf("tracing.service-name: %q, want it to win over OTEL_SERVICE_NAME", got)
	}
}

// Each resolved sampler name maps to the SDK sampler of that name.
func TestTracingSamplers(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"always_on":                "AlwaysOnSampler",
		"always_off":               "AlwaysOffSampler",
		"traceidratio":             "TraceIDRatioBased{0.25}",
		"parentbased_always_on":    "ParentBased{root:AlwaysOnSampler",
		"parentbased_always_off":   "ParentBased{root:AlwaysOffSampler",
		"parentbased_traceidratio": "ParentBased{root:TraceIDRatioBased{0.25}",
	} {
		if got := newSampler(name, 0.25).Description(); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %s, want %s…", name, got, want)
		}
	}
}

// config check reports the tracing set-up it resolved, or the key or
// variable at fault with exit 2; txbox relay refuses the same input
// before it opens anything.
func TestConfigCheckTracing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "txbox.yaml")
	base := "database: { dsn: " + filepath.Join(dir, "t.db") + " }\nsenders: { hooks: { type: webhook } }\ndefaults: { route: { url: 'http://127.0.0.1:1/hook' } }\n"
	write := func(yml string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(base+yml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	if code, out, errOut := runInProcess(t, nil, "config", "check", "--config", path); code != exitOK || !strings.Contains(out, "tracing: off") {
		t.Fatalf("no tracing: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	write("tracing: { endpoint: 'https://collector:4317', protocol: grpc, sample-ratio: 0.5, headers-env: OTLP_H }\n")
	code, out, errOut := runInProcess(t, []string{"OTLP_H=x-api-key=s3cr3t-header"}, "config", "check", "--config", path)
	if want := "tracing: OTLP grpc to https://collector:4317, sampler parentbased_traceidratio"; code != exitOK || !strings.Contains(out, want) {
		t.Fatalf("tracing on: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "tracing.headers-env: environment variable OTLP_H is empty"},
		{[]string{"OTLP_H=s3cr3t-header"}, "tracing.headers-env: pair 1 is not name=value"},
		{[]string{"OTLP_H=a=b", "OTEL_TRACES_EXPORTER=zipkin"}, "OTEL_TRACES_EXPORTER: txbox exports otlp (or none)"},
	} {
		for _, cmd := range [][]string{{"config", "check"}, {"relay"}} {
			code, out, errOut := runInProcess(t, tc.env, append(cmd, "--config", path)...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("%v with %v: code %d, stderr %q; want 2 and %q", cmd, tc.env, code, errOut, tc.want)
			}
			if strings.Contains(out+errOut, "s3cr3t") {
				t.Errorf("%v: a header value is printed: %s%s", cmd, out, errOut)
			}
		}
	}
}
