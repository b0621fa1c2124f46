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

// options are the harness's flags.
type options struct {
	dsn, schema, natsURL, subject, stream string
	n, batch                              int
}

func parseFlags() (options, error) {
	var o options
	flag.StringVar(&o.dsn, "dsn", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL")
	flag.StringVar(&o.schema, "schema", "", "schema holding the forwarder table (must exist)")
	flag.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "NATS URL")
	flag.StringVar(&o.subject, "subject", "", "destination subject, bound by a JetStream stream")
	flag.StringVar(&o.stream, "stream", "", "the stream binding --subject, to count delivered messages")
	flag.IntVar(&o.n, "n", 50000, "backlog rows")
	flag.IntVar(&o.batch, "batch", 100, "SubscribeBatchSize")
	flag.Parse()
	if o.schema == "" || o.subject == "" || o.stream == "" || o.n < 1 {
		return o, fmt.Errorf("--schema, --subject, --stream and a positive --n are required")
	}
	return o, nil
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, o.dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	table := func(topic string) string { return pgx.Identifier{o.schema, "watermill_" + topic}.Sanitize() }
	schemaAdapter := wmsql.PostgreSQLQueueSchema{GenerateMessagesTableName: table, SubscribeBatchSize: o.batch}
	offsets := wmsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true, GenerateMessagesTableName: table}
	if err := preload(ctx, pool, o, schemaAdapter); err != nil {
		return err
	}
	logger := watermill.NopLogger{}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{SchemaAdapter: schemaAdapter, OffsetsAdapter: offsets}, logger)
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: o.natsURL, JetStream: wmnats.JetStreamConfig{TrackMsgId: true}}, logger)
	if err != nil {
		return err
	}
	defer pub.Close()
	fwd, err := forwarder.NewForwarder(sub, pub, logger, forwarder.Config{ForwarderTopic: forwardTopic, CloseTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	nc, err := nats.Connect(o.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}

	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- fwd.Run(ctx) }()
	if err := waitDelivered(js, o, errc); err != nil {
		return err
	}
	el := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	_ = fwd.Close()
	cpu := tv(after.Utime) + tv(after.Stime) - tv(before.Utime) - tv(before.Stime)
	res := Result{Events: o.n, Seconds: el.Seconds(), Rate: float64(o.n) / el.Seconds(), CPUSeconds: cpu,
		Config: fmt.Sprintf("watermill forwarder; watermill-sql PostgreSQLQueueSchema (SubscribeBatchSize %d) + "+
			"PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}; watermill-nats/v2 JetStream publisher, TrackMsgId", o.batch),
		Versions: versions()}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// preload creates the forwarder's table and COPYs the backlog of
// forwarder envelopes into it before the clock starts.
func preload(ctx context.Context, pool *pgxpool.Pool, o options, schemaAdapter wmsql.PostgreSQLQueueSchema) error {
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
	rows := make([][]any, 0, o.n)
	for range o.n {
		id := uuid.Must(uuid.NewV7()).String()
		env, _ := json.Marshal(envelope{DestinationTopic: o.subject, UUID: id, Payload: payload, Metadata: map[string]string{}})
		rows = append(rows, []any{uuid.NewString(), string(env), "{}"})
	}
	tn := pgx.Identifier{o.schema, "watermill_" + forwardTopic}
	if _, err := pool.CopyFrom(ctx, tn, []string{"uuid", "payload", "metadata"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("COPY: %w", err)
	}
	_, err = pool.Exec(ctx, "ANALYZE "+tn.Sanitize())
	return err
}

// waitDelivered polls the stream until it holds every event, failing when
// the count stalls for 2 minutes or the forwarder stops.
func waitDelivered(js nats.JetStreamContext, o options, errc <-chan error) error {
	lastChange, last := time.Now(), uint64(0)
	for {
		info, err := js.StreamInfo(o.stream)
		if err != nil {
			return err
		}
		if info.State.Msgs >= uint64(o.n) {
			return nil
		}
		if info.State.Msgs != last {
			last, lastChange = info.State.Msgs, time.Now()
		}
		if time.Since(lastChange) > 2*time.Minute {
			return fmt.Errorf("stalled at %d of %d for 2 minutes", last, o.n)
		}
		select {
		case err := <-errc:
			return fmt.Errorf("forwarder stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
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
