package orders_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/otlpreceiver"
	"github.com/txbox/txbox/internal/testenv"
)

// TestOrdersTrace follows one order across the three processes: the
// producer, `txbox relay` and the consumer all export to one in-process
// OTLP receiver, and the order's trace must hold the producer's request
// span, the relay's span for the message (its child, linked to the
// relay's batch span) and the consumer's span (the relay span's child),
// all with the same trace id.
func TestOrdersTrace(t *testing.T) {
	t.Parallel()
	bin := buildSystem(t)
	recv := otlpreceiver.Start(t)
	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	run := strings.ToLower(testenv.UniqueName("ordtrace"))
	schema, stream, prefix := run, strings.ToUpper(run), run
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`) })
	t.Cleanup(func() { deleteStream(stream) })

	// The standard variables, as a deployment would set them for every
	// service; a short export interval so the spans arrive while running.
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.HTTPURL, "OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_BSP_SCHEDULE_DELAY=100"}
	producer := start(t, "producer", bin, otel, "producer", "-dsn", testenv.PostgresURL, "-schema", schema, "-listen", "127.0.0.1:0")
	addr := producer.waitLog(t, regexp.MustCompile(`msg="producer listening" addr=(\S+)`))
	relay := start(t, "relay", bin, append(otel, "TXBOX_DATABASE_DSN="+testenv.PostgresURL, "TXBOX_SENDERS_MAIN_URL="+testenv.NATSURL),
		"txbox", "relay", "--config", "txbox.yaml",
		"--set", "database.schema="+schema,
		"--set", "senders.main.provision-stream="+stream,
		"--set", "senders.main.provision-subjects="+prefix+".>",
		"--set", "defaults.route.subject="+prefix+".{event_type}")
	consumer := start(t, "consumer", bin, otel, "consumer", "-dsn", testenv.PostgresURL, "-schema", schema, "-nats", testenv.NATSURL,
		"-stream", stream, "-subjects", prefix+".>", "-name", run)
	relay.waitLog(t, regexp.MustCompile(`msg="(relay started)"`))
	consumer.waitLog(t, regexp.MustCompile(`msg="(consumer running)"`))

	resp, err := http.Post("http://"+addr+"/orders", "application/json", bytes.NewReader([]byte(`{"customer":"c-trace","total_cents":4990}`)))
	if err != nil {
		t.Fatal(err)
	}
	var order struct{ ID int64 }
	err = json.NewDecoder(resp.Body).Decode(&order)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || order.ID == 0 {
		t.Fatalf("POST /orders: %d, %+v, %v", resp.StatusCode, order, err)
	}

	var prod, send, apply otlpreceiver.Span
	testenv.WaitFor(t, 60*time.Second, "the order's spans from the three processes", func() bool {
		running(t, producer, relay, consumer)
		spans := recv.Spans()
		for _, s := range spans {
			if s.Service == "orders-producer" && s.Attributes["order.id"] == fmt.Sprint(order.ID) {
				prod = s
			}
		}
		for _, s := range spans {
			switch {
			case prod.TraceID == "" || s.TraceID != prod.TraceID:
			case s.Service == "txbox" && s.Name == "send order-created":
				send = s
			case s.Service == "orders-consumer" && s.Name == "apply order-created":
				apply = s
			}
		}
		return prod.SpanID != "" && send.SpanID != "" && apply.SpanID != ""
	})
	t.Logf("trace %s: %s (%s) → %s (%s) → %s (%s)", prod.TraceID, prod.Name, prod.Service, send.Name, send.Service, apply.Name, apply.Service)
	if send.ParentSpanID != prod.SpanID {
		t.Errorf("the relay's span's parent is %s, want the producer's span %s", send.ParentSpanID, prod.SpanID)
	}
	if apply.ParentSpanID != send.SpanID {
		t.Errorf("the consumer's span's parent is %s, want the relay's span %s", apply.ParentSpanID, send.SpanID)
	}
	if len(send.Links) != 1 {
		t.Errorf("the relay's message span has links %v, want its batch span", send.Links)
	}
}
