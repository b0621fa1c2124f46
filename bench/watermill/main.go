// Command watermill is the watermill side of `txbox bench` (scenario
// "watermill", docs/benchmarks/bench-command.md): it drains a backlog
// from PostgreSQL to NATS JetStream with the watermill-sql forwarder and
// prints one JSON result on stdout. It lives in its own Go module so that
// the txbox module never depends on watermill.
//
// Configuration, watermill's fastest documented one for this job: the
// forwarder (components/forwarder) subscribed with watermill-sql's
// PostgreSQLQueueSchema and PostgreSQLQueueOffsetsAdapter{DeleteOnAck:
// true} (one table, rows deleted on ack, no per-consumer offsets table),
// SubscribeBatchSize 100 (its default), publishing with watermill-nats/v2
// on JetStream with TrackMsgId (Nats-Msg-Id, as txbox sets it). The
// backlog is preloaded with COPY of forwarder envelopes before the clock
// starts.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
)

// Result is what the harness prints: the txbox bench parent reads it.
type Result struct {
	Events     int     `json:"events"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"rate"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Config     string  `json:"config"`
	Versions   string  `json:"versions"`
}

const forwardTopic = "txbox_bench_forward"

// envelope mirrors watermill's forwarder envelope (components/forwarder).
type envelope struct {
	DestinationTopic string            `json:"destination_topic"`
	UUID             string            `json:"uuid"`
	Payload          []byte            `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "watermill bench:", err)
		os.Exit(1)
	}
}

func run() error {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL")
	schema := flag.String("schema", "", "schema holding the forwarder table (must exist)")
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "NATS URL")
	subject := flag.String("subject", "", "destination subject, bound by a JetStream stream")
	stream := flag.String("stream", "", "the stream binding --subject, to count delivered messages")
	n := flag.Int("n", 50000, "backlog rows")
	batch := flag.Int("batch", 100, "SubscribeBatchSize")
	flag.Parse()
	if *schema == "" || *subject == "" || *stream == "" || *n < 1 {
		return fmt.Errorf("--schema, --subject, --stream and a positive --n are required")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	table := func(topic string) string { return pgx.Identifier{*schema, "watermill_" + topic}.Sanitize() }
	schemaAdapter := wmsql.PostgreSQLQueueSchema{GenerateMessagesTableName: table, SubscribeBatchSize: *batch}
	offsets := wmsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true, GenerateMessagesTableName: table}
	qs, err := schemaAdapter.SchemaInitializingQueries(wmsql.SchemaInitializingQueriesParams{Topic: forwardTopic})
	if err != nil {
		return err
	}
	for _, q := range qs {
		if _, err := pool.Exec(ctx, q.Query, q.Args...); err != nil {
			return fmt.Errorf("create table: %w", err)
		}
	}
	payload := []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","customer":"c-778"}`)
	rows := make([][]any, 0, *n)
	for range *n {
		id := uuid.Must(uuid.NewV7()).String()
		env, _ := json.Marshal(envelope{DestinationTopic: *subject, UUID: id, Payload: payload, Metadata: map[string]string{}})
		rows = append(rows, []any{uuid.NewString(), string(env), "{}"})
	}
	tn := pgx.Identifier{*schema, "watermill_" + forwardTopic}
	if _, err := pool.CopyFrom(ctx, tn, []string{"uuid", "payload", "metadata"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("COPY: %w", err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+tn.Sanitize()); err != nil {
		return err
	}
	rows = nil

	logger := watermill.NopLogger{}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{SchemaAdapter: schemaAdapter, OffsetsAdapter: offsets}, logger)
	if err != nil {
		return err
	}
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: *natsURL, JetStream: wmnats.JetStreamConfig{TrackMsgId: true}}, logger)
	if err != nil {
		return err
	}
	fwd, err := forwarder.NewForwarder(sub, pub, logger, forwarder.Config{ForwarderTopic: forwardTopic, CloseTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	nc, err := nats.Connect(*natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}

	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- fwd.Run(ctx) }()
	lastChange, last := time.Now(), uint64(0)
	for {
		info, err := js.StreamInfo(*stream)
		if err != nil {
			return err
		}
		if info.State.Msgs >= uint64(*n) {
			break
		}
		if info.State.Msgs != last {
			last, lastChange = info.State.Msgs, time.Now()
		}
		if time.Since(lastChange) > 2*time.Minute {
			return fmt.Errorf("stalled at %d of %d for 2 minutes", last, *n)
		}
		select {
		case err := <-errc:
			return fmt.Errorf("forwarder stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	el := time.Since(start)
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	_ = fwd.Close()
	_ = pub.Close()
	_ = sub.Close()
	cpu := tv(after.Utime) + tv(after.Stime) - tv(before.Utime) - tv(before.Stime)
	res := Result{Events: *n, Seconds: el.Seconds(), Rate: float64(*n) / el.Seconds(), CPUSeconds: cpu,
		Config: fmt.Sprintf("watermill forwarder; watermill-sql PostgreSQLQueueSchema (SubscribeBatchSize %d) + "+
			"PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}; watermill-nats/v2 JetStream publisher, TrackMsgId", *batch),
		Versions: versions()}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// versions reports the watermill modules this binary was built with.
func versions() string {
	var out []string
	if bi, ok := readBuildInfo(); ok {
		for _, d := range bi.Deps {
			if strings.Contains(d.Path, "ThreeDotsLabs") {
				out = append(out, d.Path+" "+d.Version)
			}
		}
	}
	return strings.Join(out, ", ")
}
