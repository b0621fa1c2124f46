package consumetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/sqlite"
)

// Env is one test's inbox and effect table.
type Env struct {
	Store *sqlite.Driver
	Inbox *inbox.Inbox

	mu         sync.Mutex
	failLeft   map[txbox.ID]int
	poison     map[txbox.ID]bool
	calls      int
	deliveries map[txbox.ID][]inbox.Delivery
}

// Deliveries returns the delivery metadata of every handler call for id,
// in call order.
func (e *Env) Deliveries(id txbox.ID) []inbox.Delivery {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]inbox.Delivery(nil), e.deliveries[id]...)
}

// Poison makes the handler fail every delivery of id with an error marked
// txbox.Permanent.
func (e *Env) Poison(id txbox.ID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.poison[id] = true
}

// ErrInjected is returned by the handler for ids given to FailFirst.
var ErrInjected = errors.New("consumetest: injected handler failure")

// New opens a migrated SQLite store in t's temp dir and an inbox on it
// named consumer.
func New(t testing.TB, consumer string) *Env {
	t.Helper()
	d := storeharness.SQLiteDriver(t)
	if _, err := d.DB().Exec(`CREATE TABLE effect (event_id TEXT NOT NULL, payload BLOB)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(d, inbox.Config{Consumer: consumer})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Store: d, Inbox: in, failLeft: map[txbox.ID]int{}, poison: map[txbox.ID]bool{}, deliveries: map[txbox.ID][]inbox.Delivery{}}
}

// FailFirst makes the handler fail the first n deliveries of id.
func (e *Env) FailFirst(id txbox.ID, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failLeft[id] = n
}

// Calls returns how many times the handler ran.
func (e *Env) Calls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

// Handler writes one effect row per message through the inbox transaction
// (after the injected failures of FailFirst).
func (e *Env) Handler(ctx context.Context, tx any, m inbox.Message) error {
	e.mu.Lock()
	e.calls++
	e.deliveries[m.ID] = append(e.deliveries[m.ID], m.Delivery)
	fail := e.failLeft[m.ID] > 0
	if fail {
		e.failLeft[m.ID]--
	}
	poison := e.poison[m.ID]
	e.mu.Unlock()
	stx, err := sqlite.SQLTx(tx)
	if err != nil {
		return err
	}
	if _, err := stx.ExecContext(ctx, `INSERT INTO effect (event_id, payload) VALUES (?, ?)`, m.ID.String(), m.Payload); err != nil {
		return err
	}
	if poison {
		return txbox.Permanent(ErrInjected)
	}
	if fail {
		return ErrInjected
	}
	return nil
}

// Effects returns the effect rows per event id.
func (e *Env) Effects(t testing.TB) map[txbox.ID]int {
	t.Helper()
	return storeharness.QueryCounts(t, e.Store.DB(), `SELECT event_id, count(*) FROM effect GROUP BY event_id`)
}

// WaitEffects polls until every id in want has an effect or the deadline
// passes, then checks that each has exactly one and that no other id has
// any.
func (e *Env) WaitEffects(t testing.TB, want []txbox.ID, within time.Duration) {
	t.Helper()
	waitForEffects(t, within, 10*time.Millisecond, "events", want, e.Effects)
	e.CheckExactlyOnce(t, want)
}

// CheckExactlyOnce checks one effect per id in want and none other: the
// delivery oracle (lost = 0, duplicated effects = 0, unexpected = 0).
func (e *Env) CheckExactlyOnce(t testing.TB, want []txbox.ID) {
	t.Helper()
	got := e.Effects(t)
	wantSet := make(map[txbox.ID]bool, len(want))
	var lost, dup, unexpected int
	for _, id := range want {
		wantSet[id] = true
		switch n := got[id]; {
		case n == 0:
			lost++
		case n > 1:
			dup++
		}
	}
	for id := range got {
		if !wantSet[id] {
			unexpected++
		}
	}
	if lost+dup+unexpected > 0 {
		t.Errorf("effects: %d lost, %d duplicated, %d unexpected (of %d events)", lost, dup, unexpected, len(want))
	}
}

// waitForEffects polls effects until every id in want has one, failing t
// after within with how many of the events (what they are: "events",
// "committed events") still have none.
func waitForEffects(t testing.TB, within, poll time.Duration, what string, want []txbox.ID, effects func(testing.TB) map[txbox.ID]int) {
	t.Helper()
	missing := 0
	defer func() {
		// Runs also when WaitFor fails the test.
		if missing > 0 {
			t.Errorf("%d of %d %s have no effect after %s (lost so far)", missing, len(want), what, within)
		}
	}()
	testenv.WaitForEvery(t, within, poll, fmt.Sprintf("all %d %s to have an effect", len(want), what), func() bool {
		got := effects(t)
		missing = 0
		for _, id := range want {
			if got[id] == 0 {
				missing++
			}
		}
		return missing == 0
	})
}

// Start runs a consumer's Run (as Run does) and returns stop, which
// cancels it, waits for it to return and fails t if it returned an error.
// stop runs once, at the latest when t ends.
func Start(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	_, cancel, done := Run(run)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Run starts run, a consumer's Run, in a goroutine of its own on a context
// of its own: cancel stops it, and done receives what Run returned.
func Run(run func(context.Context) error) (ctx context.Context, cancel context.CancelFunc, done <-chan error) {
	ctx, cancel = context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- run(ctx) }()
	return ctx, cancel, ch
}
