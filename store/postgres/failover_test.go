package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/pgcluster"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// daemonPool opens a pool on dsn as `txbox relay` does (config.OpenStore):
// an idle connection is pinged only after five minutes idle
// (config.PingAfterIdle), so a dead one is found by the statement that
// uses it. The pool is closed when the test ends.
func daemonPool(t *testing.T, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > 5*time.Minute }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// fillPool makes the pool hold n idle connections.
func fillPool(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// claimOnce claims up to 10 rows of typ and acknowledges them.
func claimOnce(ctx context.Context, d *postgres.Driver, typ string) (int, error) {
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
	}
	_, err = d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items})
	return len(rows), err
}

// publishOnce inserts one event of typ in its own transaction. ownErr is
// the error of the caller's own statements (begin, commit), err the
// driver's.
func publishOnce(ctx context.Context, d *postgres.Driver, pool *pgxpool.Pool, typ string) (id txbox.ID, ownErr, err error) {
	id = txbox.NewID()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return id, err, nil
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{{ID: id, Type: typ, Payload: []byte(`{}`)}}}); err != nil {
		return id, nil, err
	}
	return id, tx.Commit(ctx), nil
}

// TestResetOncePerLoss: when the server ends every pooled connection
// (pg_terminate_backend, as a shutdown does), the first call that fails
// resets the pool and the next calls dial afresh, instead of failing
// once per dead connection; the calls that fail together reset it once;
// the driver logs the loss once, then the database reachable again with
// its host; a later loss resets it again.
func TestResetOncePerLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	appName := testenv.UniqueName("txbox_reset_")
	u, err := url.Parse(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", appName)
	u.RawQuery = q.Encode()
	pool := daemonPool(t, u.String(), 6)
	logs := testenv.NewLogRecorder()
	d, err := postgres.New(pool, postgres.Config{Schema: newSchema(t), Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	terminate := func() {
		t.Helper()
		fillPool(t, pool, 6)
		var n int
		err := admin(t).QueryRowContext(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = $1) x`, appName).Scan(&n)
		if err != nil || n != 6 {
			t.Fatalf("terminated %d sessions: %v", n, err)
		}
	}
	reachable := func(want int) {
		t.Helper()
		testenv.WaitFor(t, 10*time.Second, "database reachable again", func() bool {
			return len(logs.Records("database reachable again")) == want
		})
	}

	// Calls at once, each on its own dead connection, or on a fresh one
	// once the first failure has reset the pool.
	terminate()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { _, errs[i] = claimOnce(ctx, d, "orders") })
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if !errors.Is(err, store.ErrConnectionLost) {
				t.Errorf("a claim on a terminated connection: %v, want store.ErrConnectionLost", err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no claim failed on the terminated connections")
	}
	if n := postgres.Resets(d); n != 1 {
		t.Fatalf("%d claims failed together and reset the pool %d times, want once", failed, n)
	}
	reachable(1)
	t.Logf("concurrent: %d of 6 claims failed, one reset", failed)

	// One call after another: only the first fails.
	terminate()
	failed = 0
	for range 6 {
		if _, err := claimOnce(ctx, d, "orders"); err != nil {
			failed++
		}
	}
	if failed != 1 || postgres.Resets(d) != 2 {
		t.Fatalf("after a second loss %d of 6 claims in a row failed and the pool was reset %d times in all, want 1 and 2", failed, postgres.Resets(d))
	}
	reachable(2)

	lost := logs.Records("database connection lost")
	if len(lost) != 2 || lost[0].Level != slog.LevelWarn || lost[0].Attrs["error"] == "" {
		t.Errorf("want one warning per loss with its error; logged:\n%s", logs)
	}
	for _, r := range logs.Records("database reachable again") {
		if r.Level != slog.LevelInfo || r.Attrs["host"] != testenv.PostgresAddr || r.Attrs["down_for"] == "" {
			t.Errorf("reachable again: %+v, want INFO with host %s", r, testenv.PostgresAddr)
		}
	}
}

// opLog records the outcome of every call of a workload.
type opLog struct {
	mu  sync.Mutex
	ops []op
}

type op struct {
	kind string // "insert" or "claim"
	at   time.Time
	// err is the driver's error; own the error of the caller's own
	// statements around it (an insert's begin and commit).
	err, own error
	id       txbox.ID // an insert's event
}

func (l *opLog) add(o op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, o)
}

// firstOK is when the first call of kind that ended after t succeeded.
func (l *opLog) firstOK(kind string, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.ops {
		if o.kind == kind && o.err == nil && o.own == nil && o.at.After(t) {
			return o.at, true
		}
	}
	return time.Time{}, false
}

func (l *opLog) all() []op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]op(nil), l.ops...)
}

// TestFailoverFollowsPrimary: a driver on a multi-host DSN with
// target_session_attrs=read-write over a PostgreSQL 17 primary and its
// synchronous standby, with producers and claimers running. The primary
// is killed (SIGKILL) and the standby promoted: the first failure resets
// the pool once, every failure matches store.ErrConnectionLost, inserts
// and claims succeed on the new primary within a second of the
// promotion, nothing acknowledged is missing there, and the log says the
// database is reachable again on the new primary's address.
func TestFailoverFollowsPrimary(t *testing.T) {
	t.Parallel()
	p := pgcluster.Start(t, pgcluster.V17, pgcluster.Options{})
	s := pgcluster.AddStandby(t, p, pgcluster.StandbyOptions{Synchronous: true})
	pool := daemonPool(t, pgcluster.MultiHostDSN("test", p, s), 8)
	logs := testenv.NewLogRecorder()
	d, err := postgres.New(pool, postgres.Config{Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	fillPool(t, pool, 8) // dead connections to find after the kill

	var log opLog
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	loop := func(kind string, call func(ctx context.Context) (id txbox.ID, own, err error)) {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond) // the workload's pace
			defer tick.Stop()
			for {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				id, own, err := call(cctx)
				cancel()
				if ctx.Err() != nil {
					return
				}
				log.add(op{kind: kind, at: time.Now(), err: err, own: own, id: id})
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	for range 2 {
		loop("insert", func(ctx context.Context) (txbox.ID, error, error) { return publishOnce(ctx, d, pool, "orders") })
		loop("claim", func(ctx context.Context) (txbox.ID, error, error) {
			_, err := claimOnce(ctx, d, "orders")
			return txbox.ID{}, nil, err
		})
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	testenv.WaitFor(t, 30*time.Second, "inserts and claims on the first primary", func() bool {
		_, ins := log.firstOK("insert", time.Time{})
		_, cl := log.firstOK("claim", time.Time{})
		return ins && cl
	})

	killed := time.Now()
	p.Kill(t)
	pgcluster.Promote(t, s)
	promoted := time.Now()
	var insertAt, claimAt time.Time
	testenv.WaitFor(t, 30*time.Second, "an insert and a claim on the new primary", func() bool {
		var ok1, ok2 bool
		insertAt, ok1 = log.firstOK("insert", promoted)
		claimAt, ok2 = log.firstOK("claim", promoted)
		return ok1 && ok2
	})
	testenv.WaitFor(t, 10*time.Second, "the log saying the database is reachable again", func() bool {
		return len(logs.Records("database reachable again")) > 0
	})
	stop()
	wg.Wait()
	back := logs.Records("database reachable again")[0]
	t.Logf("killed → promoted %v; promoted → insert %v, claim %v, logged reachable again %v",
		promoted.Sub(killed).Round(time.Millisecond), insertAt.Sub(promoted).Round(time.Millisecond),
		claimAt.Sub(promoted).Round(time.Millisecond), back.Time.Sub(promoted).Round(time.Millisecond))

	if n := postgres.Resets(d); n != 1 {
		t.Errorf("the pool was reset %d times, want once", n)
	}
	for _, what := range []time.Time{insertAt, claimAt} {
		if lag := what.Sub(promoted); lag > 3*time.Second {
			t.Errorf("a call succeeded %v after the promotion, want within 3s (about 1s)", lag)
		}
	}
	failed, acked := 0, map[txbox.ID]bool{}
	for _, o := range log.all() {
		switch {
		case o.err == nil && o.own == nil && o.kind == "insert":
			acked[o.id] = true
		case o.own != nil:
			failed++
		case o.err != nil:
			failed++
			if !errors.Is(o.err, store.ErrConnectionLost) {
				t.Errorf("%s at %v after the kill: %v, want store.ErrConnectionLost", o.kind, o.at.Sub(killed), o.err)
			}
		}
	}
	t.Logf("%d calls failed during the failover", failed)
	if back.Attrs["host"] != s.Addr() || back.Level != slog.LevelInfo {
		t.Errorf("reachable again: %+v, want INFO with host %s (the new primary)", back, s.Addr())
	}
	if lost := logs.Records("database connection lost"); len(lost) != 1 || lost[0].Level != slog.LevelWarn {
		t.Errorf("want one warning of the loss; logged:\n%s", logs)
	}

	// Every acknowledged insert is on the new primary (a synchronous
	// standby had flushed it).
	rows, err := pool.Query(context.Background(), `SELECT id::text FROM txbox_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	found := map[txbox.ID]bool{}
	for _, s := range have {
		id, err := txbox.ParseID(s)
		if err != nil {
			t.Fatal(err)
		}
		found[id] = true
	}
	missing := 0
	for id := range acked {
		if !found[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged inserts are missing on the new primary", missing, len(acked))
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs)
	}
}
