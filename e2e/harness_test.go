package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// storeKind adapts one SQL dialect to the delivery tests. Adding a dialect
// is one more entry in storeKinds. open and publish take no *testing.T so
// that child processes (which run no test) can use them too.
type storeKind struct {
	name string
	// newNamespace creates an isolated namespace (schema, database, file)
	// with migrated tables, dropped when t ends.
	newNamespace func(t testing.TB) string
	// open opens a driver on namespace ns for a relay or a publisher.
	// conns bounds its connection pool. close releases it.
	open func(ns string, conns int) (d store.Driver, close func(), err error)
	// publish inserts evs in one transaction on d, then commits it or,
	// when commit is false, rolls it back.
	publish func(ctx context.Context, d store.Driver, evs []*txbox.Event, commit bool) error
	// scale divides the event counts of the load tests (0 or 1 = full
	// size): SQLite has one writer for all relays and publishers, so its
	// multi-relay runs use fewer events to keep the default suite short.
	scale int
	// serialWriter is true for dialects with one writer at a time
	// (SQLite): one relay may win every claim, so load sharing between
	// relays is not asserted.
	serialWriter bool
	// claim is the relays' claim mode, set on every kind: the default
	// follows the sender (lock for NATS on PostgreSQL and MySQL), so the
	// plain kinds name lease to keep it covered. The lock kinds
	// (lockKinds) are a dialect run in ClaimLock.
	claim txbox.ClaimMode
}

// lockKinds are the dialects with a lock claim, run in ClaimLock: the
// delivery and chaos tests that prove a guarantee run on them too
// (kinds_test.go adds MySQL).
var lockKinds = []storeKind{lockKind(postgresKind)}

// lockKind returns k run in ClaimLock, named k.name + "-lock".
func lockKind(k storeKind) storeKind {
	k.name += "-lock"
	k.claim = txbox.ClaimLock
	return k
}

// withLockKinds returns storeKinds followed by lockKinds: the kinds of a
// test that must hold in every claim mode.
func withLockKinds() []storeKind {
	return append(append([]storeKind(nil), storeKinds...), lockKinds...)
}

// withLockKindsInChaos is withLockKinds under TXBOX_CHAOS (make chaos),
// storeKinds otherwise: the lock kinds of the tests whose other dialects
// already fill the default suite's time on a loaded 2-core machine. The
// relay tests run the same guarantees in both modes by default
// (relay/helpers_test.go, eachClaim).
func withLockKindsInChaos() []storeKind {
	if os.Getenv("TXBOX_CHAOS") == "" {
		return storeKinds
	}
	return withLockKinds()
}

// claimOf holds the claim mode of the drivers openStore opened for a lock
// kind, for relayConfig.
var claimOf sync.Map // store.Driver -> txbox.ClaimMode

// events returns n scaled for this dialect.
func (k storeKind) events(n int) int {
	if k.scale > 1 {
		return n / k.scale
	}
	return n
}

// storeKinds lists the dialects every delivery test runs on; kinds_test.go
// adds MySQL and SQLite. A new dialect is one more entry.
var storeKinds = []storeKind{postgresKind}

// storeKindByName finds a dialect for a child process.
func storeKindByName(name string) (storeKind, error) {
	for _, k := range append(withLockKinds(), walKind) {
		if k.name == name {
			return k, nil
		}
	}
	return storeKind{}, fmt.Errorf("e2e: unknown store kind %q", name)
}

var postgresKind = storeKind{
	name:  "postgres",
	claim: txbox.ClaimLease,
	newNamespace: func(t testing.TB) string {
		t.Helper()
		testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
		d, closeFn, err := openPostgres("", 2)
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		pool := d.(*postgres.Driver).Pool()
		schema := testenv.UniqueName("e2e_")
		ctx := context.Background()
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			d, closeFn, err := openPostgres("", 1)
			if err != nil {
				return
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = d.(*postgres.Driver).Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		})
		md, mclose, err := openPostgres(schema, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer mclose()
		if err := md.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return schema
	},
	open: openPostgres,
	publish: func(ctx context.Context, d store.Driver, evs []*txbox.Event, commit bool) error {
		tx, err := d.(*postgres.Driver).Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	},
}

func openPostgres(schema string, conns int) (store.Driver, func(), error) {
	return openPostgresWith(schema, conns, postgres.Config{})
}

// openPostgresWith is openPostgres with pc's settings (Schema is set
// here, and Logger when pc has none).
func openPostgresWith(schema string, conns int, pc postgres.Config) (store.Driver, func(), error) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = int32(conns)
	if schema != "" {
		// Lets a test find (and kill) the connections of its namespace.
		cfg.ConnConfig.RuntimeParams["application_name"] = appName(schema)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, nil, err
	}
	pc.Schema = schema
	if pc.Logger == nil {
		pc.Logger = quietLogger()
	}
	d, err := postgres.New(pool, pc)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return d, pool.Close, nil
}

// openStore opens a driver on ns closed when t ends.
func openStore(t testing.TB, k storeKind, ns string, conns int) store.Driver {
	t.Helper()
	d, closeFn, err := k.open(ns, conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	if k.claim != "" {
		claimOf.Store(d, k.claim)
		t.Cleanup(func() { claimOf.Delete(d) })
	}
	return d
}

// freshStore opens a driver of kind k with 4 connections on a namespace
// of its own; both are gone when t ends.
func freshStore(t testing.TB, k storeKind) store.Driver {
	t.Helper()
	return openStore(t, k, k.newNamespace(t), 4)
}

// eachKind runs test as a parallel subtest per kind, named after it, on a
// fresh store of that kind (freshStore).
func eachKind(t *testing.T, kinds []storeKind, test func(t *testing.T, kind storeKind, d store.Driver)) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			test(t, kind, freshStore(t, kind))
		})
	}
}

// publisher publishes events of one type in transactions of a given size,
// rolling back every rollbackEvery-th transaction, and tells the oracle.
type publisher struct {
	kind          storeKind
	d             store.Driver
	o             *oracle
	eventType     string
	txSize        int
	rollbackEvery int // 0: never
}

// run publishes n committed events (plus the rolled-back ones) with
// workers goroutines in parallel.
func (p publisher) run(t testing.TB, n, workers int) {
	t.Helper()
	ctx := context.Background()
	txs := (n + p.txSize - 1) / p.txSize
	jobs := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				size := min(p.txSize, n-j*p.txSize)
				if err := p.publishTx(ctx, size, true); err != nil {
					errs <- err
					return
				}
				if p.rollbackEvery > 0 && j%p.rollbackEvery == 0 {
					if err := p.publishTx(ctx, p.txSize, false); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	for j := 0; j < txs; j++ {
		select {
		case jobs <- j:
		case err := <-errs:
			close(jobs)
			wg.Wait()
			t.Fatalf("publish: %v", err)
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("publish: %v", err)
	default:
	}
}

func (p publisher) publishTx(ctx context.Context, size int, commit bool) error {
	return p.publishTxUntil(ctx, size, commit, time.Now().Add(2*time.Minute))
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY.
func sqliteBusy(err error) bool {
	return strings.Contains(err.Error(), "SQLITE_BUSY")
}

// publishTxUntil is publishTx retrying SQLITE_BUSY until deadline.
func (p publisher) publishTxUntil(ctx context.Context, size int, commit bool, deadline time.Time) error {
	evs := make([]*txbox.Event, size)
	ids := make([]txbox.ID, size)
	for i := range evs {
		id := txbox.NewID()
		evs[i] = &txbox.Event{ID: id, Type: p.eventType, Key: fmt.Sprintf("k%d", i%7), Payload: []byte(`{"e2e":true}`)}
		ids[i] = id
	}
	if err := p.kind.publish(ctx, p.d, evs, commit); err != nil {
		if !sqliteBusy(err) {
			return err
		}
		// SQLite's busy handler is not fair between processes: on a
		// loaded machine, with relay processes claiming (or one
		// SIGSTOPped inside its claim transaction), a writer can wait
		// past the busy timeout, as an application's would, and retry.
		// These events were not committed; if they were, the oracle
		// reports them as unexpected.
		p.o.rolledBackIDs(ids...)
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // a writer's retry pause
		return p.publishTxUntil(ctx, size, commit, deadline)
	}
	if commit {
		p.o.committedIDs(ids...)
	} else {
		p.o.rolledBackIDs(ids...)
	}
	return nil
}

// outboxSettled reports whether d has no PENDING or IN_PROCESS rows.
func outboxSettled(t testing.TB, d store.Driver) bool {
	t.Helper()
	pending, inProcess := outboxCounts(t, d)
	return pending+inProcess == 0
}

// outboxCounts sums the pending rows and the rows claimed and not yet
// finished, over every type.
func outboxCounts(t testing.TB, d store.Driver) (pending, inProcess int64) {
	t.Helper()
	stats, err := d.OutboxStats(context.Background())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	for _, s := range stats {
		pending += s.Pending
		inProcess += s.InProcess
	}
	return pending, inProcess
}

// appName is the application_name of the connections opened on a
// PostgreSQL namespace.
func appName(schema string) string { return "txbox_e2e_" + schema }
