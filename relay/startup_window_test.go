package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/storetest"
)

// slowListenDriver is a PostgreSQL driver whose wake-up listener takes
// listenDelay to connect and LISTEN, as on a busy server or a slow link:
// it widens the window at the relay's start between discovery's first
// look and the LISTEN, in which a NOTIFY reaches no one.
type slowListenDriver struct {
	*postgres.Driver
	listenDelay time.Duration
}

func (d *slowListenDriver) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d.listenDelay):
		return nil
	}
}

func (d *slowListenDriver) OutboxListen(ctx context.Context, wake func(string)) error {
	if err := d.wait(ctx); err != nil {
		return err
	}
	return d.Driver.OutboxListen(ctx, wake)
}

func (d *slowListenDriver) OutboxListenReady(ctx context.Context, wake func(string), ready func()) error {
	if err := d.wait(ctx); err != nil {
		return err
	}
	return d.Driver.OutboxListenReady(ctx, wake, ready)
}

// TestStartUpWindowDelivers: an event of a type the
// relay has never seen, published at a random moment around the relay's
// start (from 150ms before to 300ms after Start, 20 times), is delivered
// within startUpBound of its commit, far below the defaults' discovery
// interval (10s) and idle poll (1m) that a missed wake-up would cost.
//
//   - postgres: published as another process would (NOTIFY, no
//     in-process wake-up), with a listener that takes 400ms to LISTEN:
//     a NOTIFY sent after discovery's first look and before the LISTEN
//     reached no one, so the type waited for discovery's next round.
//   - sqlite: published in process (outbox.Config.OnPublish →
//     Relay.Wake), the commit held up to 100ms: a wake-up before Start was
//     dropped, and a commit after discovery's first look then waited for
//     its next round.
func TestStartUpWindowDelivers(t *testing.T) {
	t.Parallel()
	const iterations = 20
	const startUpBound = 3 * time.Second
	for _, tc := range []struct {
		name      string
		h         storetest.Harness
		inProcess bool
	}{
		{"postgres", storeharness.Postgres(), false},
		{"sqlite", storeharness.SQLite(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d, err := tc.h.Open(t, tc.h.NewNamespace(t), "")
			if err != nil {
				t.Fatal(err)
			}
			if err := d.(interface{ Migrate(context.Context) error }).Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			var st store.Driver = d
			if pd, ok := d.(*postgres.Driver); ok {
				st = &slowListenDriver{Driver: pd, listenDelay: 400 * time.Millisecond}
			}
			var worst time.Duration
			for i := range iterations {
				snd := newTestSender()
				// The defaults' discovery and polling intervals: only a
				// wake-up or a look can deliver within the bound.
				cfg := relay.Config{Store: st, Senders: map[string]sender.Sender{"test": snd}, Logger: quietLogger()}
				r, err := relay.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				pubCfg := outbox.Config{}
				if tc.inProcess {
					pubCfg = outbox.Config{DisableNotify: true, OnPublish: func(types []string) { r.Wake(types...) }}
				}
				pub, err := outbox.NewPublisher(d, pubCfg)
				if err != nil {
					t.Fatal(err)
				}
				typ := fmt.Sprintf("startup.%d", i) // new to this relay
				id := txbox.NewID()
				offset := time.Duration(rand.Int64N(int64(450*time.Millisecond))) - 150*time.Millisecond
				hold := time.Duration(rand.Int64N(int64(100 * time.Millisecond)))
				start := time.Now().Add(max(-offset, 0))
				committed := make(chan time.Time, 1)
				go func() {
					time.Sleep(time.Until(start.Add(offset)))
					tx := tc.h.Begin(t, d)
					if _, err := pub.Publish(ctx, tx.Native(), txbox.Event{ID: id, Type: typ, Payload: []byte("1")}); err != nil {
						t.Error(err)
					}
					if tc.inProcess {
						time.Sleep(hold) // the OnPublish wake-up comes this long before the commit
					}
					if err := tx.Commit(); err != nil {
						t.Error(err)
					}
					committed <- time.Now()
				}()
				time.Sleep(time.Until(start))
				if err := r.Start(ctx); err != nil {
					t.Fatal(err)
				}
				at := <-committed
				deadline := time.Now().Add(startUpBound + time.Until(at))
				for len(snd.deliveries(id)) == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := r.Stop(sctx); err != nil {
					t.Error(err)
				}
				cancel()
				got := snd.deliveries(id)
				if len(got) == 0 {
					t.Fatalf("iteration %d: the event published %v after Start (commit held %v) was not delivered within %v of its commit",
						i, offset.Round(time.Millisecond), hold.Round(time.Millisecond), startUpBound)
				}
				took := max(got[0].at.Sub(at), 0)
				worst = max(worst, took)
			}
			t.Logf("%d new types published around the start: each delivered, the slowest %v after its commit", iterations, worst.Round(time.Millisecond))
		})
	}
}
