package bench

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/internal/cpuprofile"
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
	id      string
	typ     string
	payload []byte
}

// naivePublisher publishes one claimed batch with a raw client and
// returns once every message is acknowledged.
type naivePublisher interface {
	publish(ctx context.Context, rows []naiveRow) error
	close()
}

// naiveDB is the naive loop's table on one database.
type naiveDB interface {
	claim(ctx context.Context) ([]naiveRow, error)
	// finish deletes the batch (acked) or puts it back (status 0).
	finish(ctx context.Context, ids []string, acked bool) error
	close()
}

// RunNaive is the naive-loop child: it runs until SIGTERM (ctx done).
func RunNaive(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("txbox bench "+NaiveChild, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dialect := fs.String("dialect", dialectPostgres, "postgres, mysql or sqlite")
	dsn := fs.String("dsn", "", "database DSN")
	table := fs.String("table", "", "table (schema-qualified on PostgreSQL)")
	kind := fs.String("sender", "nats", "raw client")
	url := fs.String("url", "", "broker URL or address")
	dest := fs.String("dest", "", "subject, topic, queue, stream or path")
	workers := fs.Int("workers", 4, "workers")
	batch := fs.Int("batch", 500, "rows per claim")
	rows := fs.Int("rows", 0, "with --dialect memory: the rows to hand out")
	profile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return &UsageError{err.Error()}
	}
	stopProfile, err := cpuprofile.Start(*profile)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopProfile(); err != nil {
			fmt.Fprintln(stderr, err)
		}
	}()
	var db naiveDB
	switch {
	case *dest == "" || *workers < 1 || *batch < 1:
		return usagef("%s needs --dest and positive --workers, --batch", NaiveChild)
	case *dialect == dialectMemory:
		if *rows < 1 {
			return usagef("%s --dialect %s needs a positive --rows", NaiveChild, dialectMemory)
		}
		db = newNaiveMemory(*rows, *batch)
	case *dsn == "" || *table == "":
		return usagef("%s needs --dsn and --table", NaiveChild)
	default:
		if db, err = openNaiveDB(ctx, *dialect, *dsn, *table, *batch, *workers); err != nil {
			return err
		}
	}
	defer db.close()
	pub, err := newNaivePublisher(*kind, *url, *dest, *workers)
	if err != nil {
		return err
	}
	defer pub.close()
	fmt.Fprintln(stderr, naiveReady)
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := naiveWorker(ctx, db, pub); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func naiveWorker(ctx context.Context, db naiveDB, pub naivePublisher) error {
	var ids []string
	for ctx.Err() == nil {
		rows, err := db.claim(ctx)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		ids = ids[:0]
		for _, r := range rows {
			ids = append(ids, r.id)
		}
		perr := pub.publish(ctx, rows)
		if err := db.finish(context.WithoutCancel(ctx), ids, perr == nil); err != nil {
			return errors.Join(perr, err)
		}
	}
	return nil
}

func openNaiveDB(ctx context.Context, dialect, dsn, table string, batch, workers int) (naiveDB, error) {
	switch dialect {
	case dialectPostgres:
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = int32(workers) + 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &naivePG{pool: pool, table: table, claimQ: fmt.Sprintf(`WITH c AS (
	SELECT id FROM %[1]s WHERE status = 0 ORDER BY created_at LIMIT %[2]d FOR UPDATE SKIP LOCKED)
UPDATE %[1]s t SET status = 1, attempts = t.attempts + 1 FROM c WHERE t.id = c.id
RETURNING t.id::text, t.event_type, t.payload::text`, table, batch)}, nil
	case dialectMySQL, dialectSQLite:
		driver := map[string]string{dialectMySQL: "mysql", dialectSQLite: "sqlite"}[dialect]
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(workers + 1)
		return &naiveSQL{db: db, dialect: dialect, table: table, batch: batch}, nil
	}
	return nil, usagef("unknown --dialect %q", dialect)
}

// dialectMemory is the naive loop without a database: its rows are made
// in memory as they are claimed, so the run times the loop's client and
// batches alone, what the loop would reach if claiming cost nothing.
const dialectMemory = "memory"

// naiveMemory hands out n rows batch by batch, made as they are claimed
// (an id of the run's prefix and a counter); finish does nothing.
type naiveMemory struct {
	mu      sync.Mutex
	prefix  string
	next    int
	n       int
	batch   int
	payload []byte
}

func newNaiveMemory(n, batch int) *naiveMemory {
	return &naiveMemory{prefix: uuid.NewString() + "-", n: n, batch: batch, payload: []byte(benchPayload)}
}

func (d *naiveMemory) claim(context.Context) ([]naiveRow, error) {
	d.mu.Lock()
	k := min(d.batch, d.n-d.next)
	first := d.next
	d.next += k
	d.mu.Unlock()
	out := make([]naiveRow, k)
	for i := range out {
		out[i] = naiveRow{id: d.prefix + strconv.Itoa(first+i), typ: benchType, payload: d.payload}
	}
	return out, nil
}

func (d *naiveMemory) finish(context.Context, []string, bool) error { return nil }

func (d *naiveMemory) close() {}

// naivePG claims in one statement: a CTE picking 500 rows FOR UPDATE
// SKIP LOCKED and an UPDATE … RETURNING them.
type naivePG struct {
	pool   *pgxpool.Pool
	table  string
	claimQ string
}

func (d *naivePG) claim(ctx context.Context) ([]naiveRow, error) {
	res, err := d.pool.Query(ctx, d.claimQ)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	var rows []naiveRow
	for res.Next() {
		var r naiveRow
		var payload string
		if err := res.Scan(&r.id, &r.typ, &payload); err != nil {
			return nil, err
		}
		r.payload = []byte(payload)
		rows = append(rows, r)
	}
	return rows, res.Err()
}

func (d *naivePG) finish(ctx context.Context, ids []string, acked bool) error {
	q := `DELETE FROM ` + d.table + ` WHERE id = ANY($1::uuid[])`
	if !acked {
		q = `UPDATE ` + d.table + ` SET status = 0 WHERE id = ANY($1::uuid[])`
	}
	_, err := d.pool.Exec(ctx, q, ids)
	return err
}

func (d *naivePG) close() { d.pool.Close() }

// naiveSQL is the same loop on MariaDB (SELECT … FOR UPDATE SKIP LOCKED
// then UPDATE in one READ COMMITTED transaction, retried on deadlock:
// MariaDB has no UPDATE … RETURNING) and
// SQLite (one UPDATE … WHERE id IN (SELECT … LIMIT) RETURNING; SQLite
// has one writer, so no SKIP LOCKED is needed).
type naiveSQL struct {
	db      *sql.DB
	dialect string
	table   string
	batch   int
}

// retry runs fn again when MariaDB reports a deadlock or a lock wait
// timeout, as a hand-written loop must.
func retry[T any](fn func() (T, error)) (T, error) {
	for i := 0; ; i++ {
		v, err := fn()
		var me *gomysql.MySQLError
		if err == nil || i == 20 || !errors.As(err, &me) || (me.Number != 1213 && me.Number != 1205) {
			return v, err
		}
	}
}

func (d *naiveSQL) claim(ctx context.Context) ([]naiveRow, error) {
	return retry(func() ([]naiveRow, error) { return d.claimOnce(ctx) })
}

func (d *naiveSQL) claimOnce(ctx context.Context) ([]naiveRow, error) {
	scan := func(res *sql.Rows) ([]naiveRow, error) {
		defer res.Close()
		var rows []naiveRow
		for res.Next() {
			var r naiveRow
			if err := res.Scan(&r.id, &r.typ, &r.payload); err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
		return rows, res.Err()
	}
	if d.dialect == dialectSQLite {
		res, err := d.db.QueryContext(ctx, fmt.Sprintf(`UPDATE %[1]s SET status = 1, attempts = attempts + 1
WHERE id IN (SELECT id FROM %[1]s WHERE status = 0 ORDER BY created_at LIMIT %[2]d)
RETURNING id, event_type, payload`, d.table, d.batch))
		if err != nil {
			return nil, err
		}
		return scan(res)
	}
	// READ COMMITTED, as the relay's MariaDB sessions run: at the default
	// REPEATABLE READ the claim's next-key locks deadlock the workers.
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.QueryContext(ctx, fmt.Sprintf(`SELECT id, event_type, payload FROM %s WHERE status = 0
ORDER BY created_at LIMIT %d FOR UPDATE SKIP LOCKED`, d.table, d.batch))
	if err != nil {
		return nil, err
	}
	rows, err := scan(res)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	ids := make([]any, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+d.table+` SET status = 1, attempts = attempts + 1 WHERE id IN (`+marks(len(ids))+`)`, ids...); err != nil {
		return nil, err
	}
	return rows, tx.Commit()
}

func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

func (d *naiveSQL) finish(ctx context.Context, ids []string, acked bool) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	q := `DELETE FROM ` + d.table + ` WHERE id IN (` + marks(len(ids)) + `)`
	if !acked {
		q = `UPDATE ` + d.table + ` SET status = 0 WHERE id IN (` + marks(len(ids)) + `)`
	}
	_, err := retry(func() (sql.Result, error) { return d.db.ExecContext(ctx, q, args...) })
	return err
}

func (d *naiveSQL) close() { _ = d.db.Close() }

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
		m.Header.Set(jetstream.MsgIDHeader, r.id)
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
		p.cl.Produce(ctx, &kgo.Record{Value: r.payload, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(r.id)}}},
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
			MessageId: r.id, Body: r.payload, DeliveryMode: amqp.Persistent, ContentType: "application/json"})
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
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.stream, Values: []any{"id", r.id, "payload", r.payload}})
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
