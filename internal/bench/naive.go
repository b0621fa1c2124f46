package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// NaiveChild is the hidden first argument of `txbox bench` that runs the
// naive loop as a child process (so its CPU time is measured like the
// relay's).
const NaiveChild = "_naive-loop"

// naiveReady is what the naive loop prints once its workers run.
const naiveReady = "naive loop started"

// The naive loop of docs/benchmarks.md "Targets": what a user writes by
// hand. Four workers each repeat: claim 500 rows in one CTE (SELECT … FOR
// UPDATE SKIP LOCKED → UPDATE status RETURNING), publish every row
// asynchronously with the raw client, wait for all acks, DELETE the batch
// by id. An idle worker sleeps 100 ms; a failed publish puts the batch
// back (status 0).
type naiveRow struct {
	id      [16]byte
	typ     string
	payload []byte
}

// naivePublisher publishes one claimed batch with a raw client and
// returns once every message is acknowledged.
type naivePublisher interface {
	publish(ctx context.Context, rows []naiveRow) error
	close()
}

// RunNaive is the naive-loop child: it runs until SIGTERM (ctx done).
func RunNaive(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("txbox bench "+NaiveChild, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "PostgreSQL URL")
	table := fs.String("table", "", "schema-qualified table")
	kind := fs.String("sender", "nats", "raw client")
	url := fs.String("url", "", "broker URL or address")
	dest := fs.String("dest", "", "subject, topic, queue, stream or path")
	workers := fs.Int("workers", 4, "workers")
	batch := fs.Int("batch", 500, "rows per claim")
	if err := fs.Parse(args); err != nil {
		return &UsageError{err.Error()}
	}
	if *dsn == "" || *table == "" || *dest == "" || *workers < 1 || *batch < 1 {
		return usagef("%s needs --dsn, --table, --dest and positive --workers, --batch", NaiveChild)
	}
	cfg, err := pgxpool.ParseConfig(*dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(*workers) + 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	pub, err := newNaivePublisher(*kind, *url, *dest, *workers)
	if err != nil {
		return err
	}
	defer pub.close()
	claim := fmt.Sprintf(`WITH c AS (
	SELECT id FROM %[1]s WHERE status = 0 ORDER BY created_at LIMIT %[2]d FOR UPDATE SKIP LOCKED)
UPDATE %[1]s t SET status = 1, attempts = t.attempts + 1 FROM c WHERE t.id = c.id
RETURNING t.id, t.event_type, t.payload::text`, *table, *batch)
	del := fmt.Sprintf(`DELETE FROM %s WHERE id = ANY($1)`, *table)
	release := fmt.Sprintf(`UPDATE %s SET status = 0 WHERE id = ANY($1)`, *table)
	fmt.Fprintln(stderr, naiveReady)
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := naiveWorker(ctx, pool, pub, claim, del, release); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func naiveWorker(ctx context.Context, pool *pgxpool.Pool, pub naivePublisher, claim, del, release string) error {
	var rows []naiveRow
	var ids [][16]byte
	for ctx.Err() == nil {
		rows, ids = rows[:0], ids[:0]
		res, err := pool.Query(ctx, claim)
		if err != nil {
			return err
		}
		for res.Next() {
			var r naiveRow
			var payload string
			if err := res.Scan(&r.id, &r.typ, &payload); err != nil {
				res.Close()
				return err
			}
			r.payload = []byte(payload)
			rows = append(rows, r)
			ids = append(ids, r.id)
		}
		if err := res.Err(); err != nil {
			return err
		}
		if len(rows) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if err := pub.publish(ctx, rows); err != nil {
			if _, rerr := pool.Exec(context.WithoutCancel(ctx), release, ids); rerr != nil {
				return errors.Join(err, rerr)
			}
			continue
		}
		if _, err := pool.Exec(context.WithoutCancel(ctx), del, ids); err != nil {
			return err
		}
	}
	return nil
}

func newNaivePublisher(kind, url, dest string, workers int) (naivePublisher, error) {
	switch kind {
	case "nats":
		nc, err := nats.Connect(url)
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
		if err != nil {
			nc.Close()
			return nil, err
		}
		return &naiveNATS{nc: nc, js: js, subj: dest}, nil
	case "kafka":
		cl, err := kgo.NewClient(kgo.SeedBrokers(url), kgo.DefaultProduceTopic(dest))
		if err != nil {
			return nil, err
		}
		return &naiveKafka{cl: cl}, nil
	case "rabbitmq":
		c, err := amqp.Dial(url)
		if err != nil {
			return nil, err
		}
		p := &naiveRabbit{c: c, queue: dest, chans: make(chan *amqp.Channel, workers)}
		for range workers {
			ch, err := c.Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			if err != nil {
				_ = c.Close()
				return nil, err
			}
			p.chans <- ch
		}
		return p, nil
	case "redis":
		return &naiveRedis{c: redis.NewClient(&redis.Options{Addr: url}), stream: dest}, nil
	case "webhook":
		tr := &http.Transport{MaxIdleConnsPerHost: 16 * workers, MaxConnsPerHost: 16 * workers}
		return &naiveWebhook{c: &http.Client{Transport: tr, Timeout: 10 * time.Second}, url: url}, nil
	}
	return nil, usagef("unknown --sender %q", kind)
}

type naiveNATS struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj string
}

func (p *naiveNATS) publish(ctx context.Context, rows []naiveRow) error {
	futs := make([]jetstream.PubAckFuture, 0, len(rows))
	for _, r := range rows {
		m := nats.NewMsg(p.subj)
		m.Data = r.payload
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%x", r.id))
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
func (p *naiveNATS) close() { p.nc.Close() }

type naiveKafka struct{ cl *kgo.Client }

func (p *naiveKafka) publish(ctx context.Context, rows []naiveRow) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	wg.Add(len(rows))
	for _, r := range rows {
		p.cl.Produce(ctx, &kgo.Record{Value: r.payload, Headers: []kgo.RecordHeader{{Key: "id", Value: r.id[:]}}},
			func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
				}
				wg.Done()
			})
	}
	wg.Wait()
	return first
}
func (p *naiveKafka) close() { p.cl.Close() }

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type naiveRabbit struct {
	c     *amqp.Connection
	queue string
	chans chan *amqp.Channel
}

func (p *naiveRabbit) publish(ctx context.Context, rows []naiveRow) error {
	ch := <-p.chans
	defer func() { p.chans <- ch }()
	dcs := make([]*amqp.DeferredConfirmation, 0, len(rows))
	for _, r := range rows {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", p.queue, false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("%x", r.id), Body: r.payload, DeliveryMode: amqp.Persistent, ContentType: "application/json"})
		if err != nil {
			return err
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		acked, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !acked {
			return errors.New("rabbitmq nacked a message")
		}
	}
	return nil
}
func (p *naiveRabbit) close() { _ = p.c.Close() }

type naiveRedis struct {
	c      *redis.Client
	stream string
}

func (p *naiveRedis) publish(ctx context.Context, rows []naiveRow) error {
	pipe := p.c.Pipeline()
	for _, r := range rows {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.stream, Values: []any{"id", fmt.Sprintf("%x", r.id), "payload", r.payload}})
	}
	_, err := pipe.Exec(ctx)
	return err
}
func (p *naiveRedis) close() { _ = p.c.Close() }

// naiveWebhook posts the batch with 16 requests in flight.
type naiveWebhook struct {
	c   *http.Client
	url string
}

func (p *naiveWebhook) publish(ctx context.Context, rows []naiveRow) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, r := range rows {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(r.payload))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
				var resp *http.Response
				resp, err = p.c.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						err = fmt.Errorf("webhook answered %s", resp.Status)
					}
				}
			}
			if err != nil {
				mu.Lock()
				first = cmpOr(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
func (p *naiveWebhook) close() {}
