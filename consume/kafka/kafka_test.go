package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
)

const topic = "orders"

func cluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func produce(t *testing.T, c *kfake.Cluster, recs []*kgo.Record) {
	t.Helper()
	p, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func record(id txbox.ID) *kgo.Record {
	return &kgo.Record{Key: []byte("k-" + id.String()[30:]), Value: []byte(`{"n":1}`), Headers: []kgo.RecordHeader{
		{Key: txbox.HeaderEventID, Value: []byte(id.String())},
		{Key: txbox.HeaderEventType, Value: []byte("order-created")},
	}}
}

func consumer(t *testing.T, c *kfake.Cluster, group string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func committedTotal(cl *kgo.Client) int64 {
	var n int64
	for _, ps := range cl.CommittedOffsets() {
		for _, o := range ps {
			n += o.Offset
		}
	}
	return n
}

// TestCommitAfterHandler: every event has exactly one effect although some
// records are duplicated and one handler fails twice; offsets cover every
// record only once all were handled; an invalid record is skipped.
func TestCommitAfterHandler(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	env := consumetest.New(t, "kafka-test")
	const n = 300
	ids := make([]txbox.ID, n)
	var recs []*kgo.Record
	for i := range ids {
		ids[i] = txbox.NewID()
		recs = append(recs, record(ids[i]))
	}
	for i := 0; i < n; i += 10 { // 10% redelivered by the producer side
		recs = append(recs, record(ids[i]))
	}
	recs = append(recs, &kgo.Record{Value: []byte("no id")})
	poison := txbox.NewID()
	env.Poison(poison)
	recs = append(recs, record(poison))
	env.FailFirst(ids[7], 2)
	produce(t, c, recs)

	cl := consumer(t, c, "g1", kgo.DisableAutoCommit())
	cons, err := kafka.New(cl, kafka.Config{Inbox: env.Inbox, Handler: env.Handler, Backoff: consumeBackoff, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	env.WaitEffects(t, ids, 60*time.Second)
	testenv.WaitForEvery(t, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("committed offsets to total %d", len(recs)), func() bool {
		return committedTotal(cl) == int64(len(recs))
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	env.CheckExactlyOnce(t, ids)
	// The handler sees where the record sits; Kafka keeps no delivery
	// count, so Count is the adapter's in-place attempt.
	ds := env.Deliveries(ids[7])
	if len(ds) != 3 {
		t.Fatalf("deliveries of the failing record = %+v, want 3", ds)
	}
	for i, d := range ds {
		if d.Broker != "kafka" || d.Source != topic || d.Count != i+1 || d.Redelivered || d.Partition != ds[0].Partition || d.Offset != ds[0].Offset {
			t.Errorf("delivery %d = %+v; want attempt %d of the same record", i+1, d, i+1)
		}
	}
	// The failing event ran three times, the duplicates never reached the
	// handler a second time.
	if got, want := env.Calls(), n+3; got != want { // the poison event once
		t.Errorf("handler calls = %d, want %d", got, want)
	}
}

// TestRestartResumesFromCommit: a second consumer of the group after the
// first stopped handles only what arrived since; events re-sent by hand are
// deduplicated by the inbox.
func TestRestartResumesFromCommit(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	env := consumetest.New(t, "kafka-restart")
	first := make([]txbox.ID, 50)
	var recs []*kgo.Record
	for i := range first {
		first[i] = txbox.NewID()
		recs = append(recs, record(first[i]))
	}
	produce(t, c, recs)
	run := func(ids []txbox.ID) {
		cl := consumer(t, c, "g2", kgo.DisableAutoCommit())
		cons, err := kafka.New(cl, kafka.Config{Inbox: env.Inbox, Handler: env.Handler})
		if err != nil {
			t.Fatal(err)
		}
		_, cancel, done := consumetest.Run(cons.Run)
		env.WaitEffects(t, ids, 60*time.Second)
		cancel()
		<-done
		cl.Close() // leave the group so the next member gets every partition
	}
	run(first)
	callsAfterFirst := env.Calls()
	second := make([]txbox.ID, 20)
	recs = recs[:0]
	for i := range second {
		second[i] = txbox.NewID()
		recs = append(recs, record(second[i]))
	}
	for _, id := range first[:10] {
		recs = append(recs, record(id)) // redelivered by hand
	}
	produce(t, c, recs)
	run(append(append([]txbox.ID{}, first...), second...))
	if got := env.Calls() - callsAfterFirst; got != len(second) {
		t.Errorf("second run called the handler %d times, want %d (only new events)", got, len(second))
	}
}

func TestWarnsOnAutoCommit(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	env := consumetest.New(t, "kafka-warn")
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		warn bool
	}{
		{"auto-commit", nil, true},
		{"disabled", []kgo.Opt{kgo.DisableAutoCommit()}, false},
		{"marks", []kgo.Opt{kgo.AutoCommitMarks()}, false},
	} {
		var logs testenv.LogBuffer
		cl := consumer(t, c, "g-"+tc.name, tc.opts...)
		if _, err := kafka.New(cl, kafka.Config{Inbox: env.Inbox, Handler: env.Handler, Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "auto-commit is on"); got != tc.warn {
			t.Errorf("%s: warned = %v, want %v; logs: %s", tc.name, got, tc.warn, logs.String())
		}
	}
	noGroup, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer noGroup.Close()
	var ce *consume.ConfigError
	if _, err := kafka.New(noGroup, kafka.Config{Inbox: env.Inbox, Handler: env.Handler}); !errors.As(err, &ce) || ce.Field != "client" {
		t.Errorf("a client without a consumer group: %v; want a *consume.ConfigError for client", err)
	}
	if _, err := kafka.New(noGroup, kafka.Config{}); err == nil {
		t.Error("missing Inbox/Handler accepted")
	}
	cl := consumer(t, c, "g-cfg", kgo.DisableAutoCommit())
	for _, cfg := range []kafka.Config{{BatchDuration: -time.Second}, {DrainTimeout: -time.Second}, {MaxPollRecords: -1}, {Concurrency: -1}} {
		cfg.Inbox, cfg.Handler = env.Inbox, env.Handler
		if _, err := kafka.New(cl, cfg); !errors.As(err, &ce) {
			t.Errorf("New(%+v) = %v; want a *consume.ConfigError", cfg, err)
		}
	}
}
