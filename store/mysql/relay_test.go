package mysql

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// recorder is an in-memory sender.Sender that records every delivery.
type recorder struct {
	mu     sync.Mutex
	count  map[txbox.ID]int
	perKey map[string][]txbox.ID // delivery order per key
	total  int
}

func newRecorder() *recorder {
	return &recorder{count: map[txbox.ID]int{}, perKey: map[string][]txbox.ID{}}
}

func (r *recorder) Send(ctx context.Context, msgs []*sender.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.count[m.ID]++
		r.total++
		if m.Key != "" {
			r.perKey[m.Key] = append(r.perKey[m.Key], m.ID)
		}
	}
	return nil
}

func (r *recorder) Close(context.Context) error { return nil }

func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.count)
}

// TestTwoRelaysOnMySQL is the end-to-end check of "N relays on one table" on this
// dialect: two relay instances, each with its own driver and pool (two
// processes as far as the database can tell), drain one table while
// producers keep publishing, one type unordered and one ordered by key.
// Nothing crashes, so every event must arrive exactly once, per-key order
// must hold, and no deadlock may happen.
func TestTwoRelaysOnMySQL(t *testing.T) {
	t.Parallel()
	for _, retention := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("retention=%v", retention), func(t *testing.T) {
			t.Parallel()
			twoRelays(t, retention)
		})
	}
}

// twoRelays runs the scenario with one outbox retention: 0 deletes rows on
// ack, anything else keeps them PROCESSED.
func twoRelays(t *testing.T, retention time.Duration) {
	_, dsn := newDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var drivers []*Driver
	for range 2 {
		d, err := Open(dsn, Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		drivers = append(drivers, d)
	}

	rec := newRecorder()
	quiet := slog.New(slog.DiscardHandler)
	batch, inFlight := 50, 2
	fast := &relay.PollingSettings{Mode: new(relay.PollingFixed), Delay: new(20 * time.Millisecond)}
	ordered := txbox.OrderingKey
	var relays []*relay.Relay
	for i, d := range drivers {
		r, err := relay.New(relay.Config{
			Store:    d,
			Senders:  map[string]sender.Sender{"mem": rec},
			Defaults: relay.EventSettings{BatchSize: &batch, InFlight: &inFlight, Polling: fast, Retention: &retention},
			Events:   map[string]relay.EventSettings{"seq": {Ordering: &ordered}},
			// Discovery is what starts the "flat" poller.
			DiscoverInterval: 100 * time.Millisecond,
			InstanceID:       fmt.Sprintf("relay-%d", i),
			Logger:           quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		relays = append(relays, r)
	}
	defer func() {
		for _, r := range relays {
			stopCtx, c := context.WithTimeout(context.Background(), 10*time.Second)
			if err := r.Stop(stopCtx); err != nil {
				t.Errorf("stop: %v", err)
			}
			c()
		}
	}()

	const (
		flat = 1500
		seq  = 500
		keys = 10
	)
	published := map[txbox.ID]bool{}
	var pubMu sync.Mutex
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < (flat+seq)/2; i += 25 {
				var evs []*txbox.Event
				for j := range 25 {
					ev := &txbox.Event{ID: txbox.NewID(), Type: "flat", Payload: []byte("x")}
					if n := i + j; n < seq/2 {
						ev.Type = "seq"
						ev.Key = fmt.Sprintf("key-%d-%d", p, n%keys)
					}
					evs = append(evs, ev)
				}
				tx, err := drivers[p].DB().BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if err := drivers[p].OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
					tx.Rollback()
					t.Error(err)
					return
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
					return
				}
				pubMu.Lock()
				for _, ev := range evs {
					published[ev.ID] = true
				}
				pubMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	testenv.WaitFor(t, 60*time.Second, "every event to be delivered", func() bool { return rec.distinct() >= flat+seq })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for id, n := range rec.count {
		if !published[id] {
			t.Errorf("unexpected delivery of %v", id)
		}
		if n != 1 {
			t.Errorf("event %v delivered %d times with no crash", id, n)
		}
	}
	if len(rec.count) != len(published) {
		t.Errorf("delivered %d distinct events, published %d", len(rec.count), len(published))
	}
	for key, seen := range rec.perKey {
		for i := 1; i < len(seen); i++ {
			if seen[i].String() < seen[i-1].String() {
				t.Fatalf("key %s delivered out of order at %d", key, i)
			}
		}
	}
	if len(rec.perKey) != 2*keys {
		t.Errorf("%d keys delivered, want %d", len(rec.perKey), 2*keys)
	}
	for i, d := range drivers {
		if n := d.deadlockRetries.Load(); n != 0 {
			t.Errorf("driver %d retried %d deadlocks", i, n)
		}
	}
	// Retention decides what is left: nothing, or every row PROCESSED,
	// once the last batch's finish (which follows its delivery) is done.
	var left, processed int
	testenv.WaitFor(t, 10*time.Second, "the last finish", func() bool {
		if err := drivers[0].DB().QueryRow("SELECT COUNT(*), COALESCE(SUM(status = 'PROCESSED'), 0) FROM "+drivers[0].qOutbox).Scan(&left, &processed); err != nil {
			t.Fatal(err)
		}
		if retention == 0 {
			return left == 0
		}
		return processed == left
	})
	if retention == 0 && left != 0 {
		t.Errorf("retention 0 left %d rows in the outbox", left)
	}
	if retention > 0 && (left != len(published) || processed != left) {
		t.Errorf("retention %v: %d rows left, %d PROCESSED; want %d, all PROCESSED", retention, left, processed, len(published))
	}
}
