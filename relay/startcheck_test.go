package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// closedPortStore is a PostgreSQL driver on a DSN whose port nothing
// listens on: a wrong DSN. pgxpool connects lazily, so only a query
// finds out.
func closedPortStore(t *testing.T) *postgres.Driver {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(pool, postgres.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestStartChecksTheStore: Start on a database that does not answer
// returns ErrStoreUnreachable within its context, wrapping the driver's
// error, and leaves the relay unstarted; on a database that answers it
// starts.
func TestStartChecksTheStore(t *testing.T) {
	t.Parallel()
	r, err := relay.New(fastConfig(closedPortStore(t), map[string]sender.Sender{"test": newTestSender()}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	err = r.Start(ctx)
	if !errors.Is(err, relay.ErrStoreUnreachable) || !errors.Is(err, store.ErrConnectionLost) {
		t.Fatalf("Start on a closed port: %v; want ErrStoreUnreachable wrapping the driver's store.ErrConnectionLost", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("Start took %s to fail", took)
	}
	select {
	case <-r.Started():
		t.Fatal("Started closed after a failed Start")
	default:
	}
	// Not started: Start may try again, and fails the same way.
	if err := r.Start(ctx); !errors.Is(err, relay.ErrStoreUnreachable) {
		t.Errorf("second Start: %v, want ErrStoreUnreachable again", err)
	}
	if err := r.Stop(ctx); !errors.Is(err, relay.ErrNotStarted) {
		t.Errorf("Stop after failed Starts: %v, want ErrNotStarted", err)
	}

	b := setup(t)
	ok, err := relay.New(fastConfig(b.store, map[string]sender.Sender{"test": b.sender}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.Start(ctx); err != nil {
		t.Fatalf("Start on a database that answers: %v", err)
	}
	if err := ok.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStartWithoutStore: with Config.StartWithoutStore, a relay whose
// database does not answer starts, and stops.
func TestStartWithoutStore(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(closedPortStore(t), map[string]sender.Sender{"test": newTestSender()})
	cfg.StartWithoutStore = true
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatalf("Start with StartWithoutStore: %v", err)
	}
	<-r.Started()
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	<-r.Stopped()
}
