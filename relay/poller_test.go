package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/startstop"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
)

// ackSender acknowledges every message and counts them.
type ackSender struct{ sent atomic.Int64 }

func (s *ackSender) Send(_ context.Context, msgs []*sender.Message) error {
	s.sent.Add(int64(len(msgs)))
	return nil
}

func (s *ackSender) Close(context.Context) error { return nil }

// sentHook counts the messages the batches it sees acked.
type sentHook struct {
	txbox.NopRelayHook
	sent atomic.Int64
}

func (h *sentHook) OnBatch(ev txbox.BatchEvent) { h.sent.Add(int64(ev.Sent)) }

// logRecords parses JSON log lines.
func logRecords(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// TestPollerAlone runs one poller built from its pollerDeps, with no
// Relay: it claims, sends and finishes a batch on a real (SQLite) store,
// and at debug level logs its claims and finishes with snake_case
// attributes and never a payload.
func TestPollerAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 5
	const secret = "payload-must-not-be-logged"
	evs := make([]*txbox.Event, n)
	for i := range evs {
		evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte(`{"card":"` + secret + `"}`)}
	}
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	snd := &ackSender{}
	cfg := Config{Store: d, Senders: map[string]sender.Sender{"test": snd},
		Defaults: EventSettings{Retention: new(time.Hour)}}.withDefaults()
	s, err := cfg.settingsFor("orders")
	if err != nil {
		t.Fatal(err)
	}
	// slog's handler serializes its writes; the buffer is read once
	// every goroutine of the poller has ended.
	var logs bytes.Buffer
	hook := &sentHook{}
	var life startstop.Lifetime
	if err := life.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	deps := pollerDeps{
		laneDeps: laneDeps{
			hooks:    []txbox.RelayHook{hook},
			log:      slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			circuits: newCircuitSet([]string{"test"}, cfg.Circuit, time.Now, func(txbox.CircuitEvent) {}),
			hard:     life.Hard(),
			life:     &life,
		},
		store: d,
		run:   life.Run(),
	}
	p := newPoller(deps, s)
	life.Go(p.run)
	testenv.WaitFor(t, 10*time.Second, "the batch finished", func() bool { return hook.sent.Load() == n })
	if err := life.End(ctx, nil); err != nil {
		t.Fatal(err)
	}

	var processed int
	if err := d.DB().QueryRow(`SELECT count(*) FROM txbox_outbox WHERE status = 'PROCESSED'`).Scan(&processed); err != nil {
		t.Fatal(err)
	}
	if processed != n {
		t.Errorf("%d rows processed, want %d", processed, n)
	}
	if got := snd.sent.Load(); got != n {
		t.Errorf("sender got %d messages, want %d", got, n)
	}

	// The debug log: a poll that claimed the rows, with its next delay,
	// and the finish, with a count per outcome.
	var poll, finish map[string]any
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for _, rec := range logRecords(t, logs.String()) {
		for k := range rec {
			if !snake.MatchString(k) {
				t.Errorf("log attribute %q of %q is not snake_case", k, rec["msg"])
			}
		}
		switch {
		case rec["msg"] == "poll" && rec["claimed"] == float64(n):
			poll = rec
		case rec["msg"] == "finished":
			finish = rec
		}
	}
	if poll == nil {
		t.Fatalf("no debug poll record with claimed=%d in:\n%s", n, logs.String())
	}
	for _, k := range []string{"event_type", "sender", "limit", "took", "next_delay"} {
		if _, ok := poll[k]; !ok {
			t.Errorf("poll record lacks %q: %v", k, poll)
		}
	}
	if poll["level"] != "DEBUG" || poll["event_type"] != "orders" || poll["limit"] != float64(DefaultBatchSize) {
		t.Errorf("poll record = %v, want DEBUG, orders, limit %d", poll, DefaultBatchSize)
	}
	if finish == nil {
		t.Fatalf("no debug finished record in:\n%s", logs.String())
	}
	want := map[string]float64{"sent": n, "retried": 0, "failed": 0, "released": 0, "fenced": 0}
	for k, v := range want {
		if finish[k] != v {
			t.Errorf("finished record: %s = %v, want %v (%v)", k, finish[k], v, finish)
		}
	}
	for _, k := range []string{"took", "send_took"} {
		if _, ok := finish[k]; !ok {
			t.Errorf("finished record lacks %q: %v", k, finish)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log contains a payload:\n%s", logs.String())
	}
}
