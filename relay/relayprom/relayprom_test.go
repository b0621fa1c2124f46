package relayprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relayprom"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// series gathers reg into name{label=value,...} -> value (counter,
// gauge, or a histogram's sample count).
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// scriptedSender acks every message except those whose payload is
// "poison" (a permanent failure) and fails whole batches with a transient
// error while down is set.
type scriptedSender struct{ down atomic.Bool }

func (s *scriptedSender) Send(_ context.Context, msgs []*sender.Message) error {
	if s.down.Load() {
		return txbox.Transient(errors.New("connection refused"))
	}
	errs := make([]error, len(msgs))
	bad := false
	for i, m := range msgs {
		if string(m.Payload) == "poison" {
			errs[i], bad = txbox.Permanent(errors.New("schema mismatch")), true
		}
	}
	if !bad {
		return nil
	}
	return &sender.BatchError{Errs: errs}
}

func (*scriptedSender) Close(context.Context) error { return nil }

func TestMetricsThroughARelay(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresDriver(t)
	m := relayprom.New(relayprom.Options{Stats: d, StatsInterval: time.Millisecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	pub, err := outbox.NewPublisher(d, outbox.Config{Hook: m})
	if err != nil {
		t.Fatal(err)
	}
	var evs []txbox.Event
	for i := range 5 {
		evs = append(evs, txbox.Event{Type: "order.created", Key: fmt.Sprint("k", i), Payload: []byte(`{}`)})
	}
	evs = append(evs, txbox.Event{Type: "order.created", Payload: []byte("poison")})
	storeharness.PostgresPublish(t, d, pub, evs...)

	// A scrape while the rows wait, before the relay starts: the backlog
	// gauges export a type once a stats query has seen it, and a relay
	// started first may drain the table before any scrape.
	if s := series(t, reg); s[`txbox_outbox_backlog{event_type=order.created,state=due}`] != 6 {
		t.Fatalf("before the relay: backlog due = %v, want 6", s[`txbox_outbox_backlog{event_type=order.created,state=due}`])
	}
	snd := &scriptedSender{}
	relaytest.Start(t, relay.Config{
		Store:   d,
		Senders: map[string]sender.Sender{"bus": snd},
		Defaults: relay.EventSettings{
			Route:   &sender.Route{Topic: "events.{event_type}"},
			Polling: &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(100 * time.Millisecond)},
		},
		Events:             map[string]relay.EventSettings{"order.created": {}},
		DeadLetterInterval: 50 * time.Millisecond,
		Circuit:            relay.CircuitConfig{CoolDown: 50 * time.Millisecond, MaxCoolDown: 200 * time.Millisecond},
		Hooks:              []txbox.RelayHook{m},
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	const sent = `txbox_relay_messages_total{event_type=order.created,result=sent,route=}`
	const dead = `txbox_relay_messages_total{event_type=order.created,result=dead_lettered,route=}`
	// The empty poll after the batch can come after the dead-letter move
	// (the first claim took all six rows): wait for it too.
	testenv.WaitFor(t, 20*time.Second, "5 sent, 1 dead-lettered and an empty poll", func() bool {
		s := series(t, reg)
		return s[sent] == 5 && s[dead] == 1 && s[`txbox_relay_job_rows_total{job=dead_letter_move}`] == 1 &&
			s[`txbox_relay_polls_total{event_type=order.created,result=empty,route=}`] > 0
	})
	s := series(t, reg)
	for key, want := range map[string]float64{
		`txbox_outbox_published_total{event_type=order.created}`:                               6,
		`txbox_relay_failed_total{event_type=order.created,route=}`:                            1,
		`txbox_relay_send_duration_seconds{destination=topic=events.order.created,sender=bus}`: 1,
		`txbox_outbox_backlog{event_type=order.created,state=due}`:                             0,
		`txbox_outbox_backlog{event_type=order.created,state=failed}`:                          0,
		`txbox_outbox_oldest_due_age_seconds{event_type=order.created}`:                        0,
	} {
		if got, ok := s[key]; !ok || got != want && !strings.HasPrefix(key, "txbox_relay_send_duration") {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
		if strings.HasPrefix(key, "txbox_relay_send_duration") && s[key] < want {
			t.Errorf("%s observed %v batches, want at least %v", key, s[key], want)
		}
	}
	if s[`txbox_relay_polls_total{event_type=order.created,result=empty,route=}`] == 0 ||
		s[`txbox_relay_claim_duration_seconds{event_type=order.created,route=}`] == 0 ||
		s[`txbox_relay_finish_duration_seconds{event_type=order.created,route=}`] == 0 {
		t.Errorf("no empty polls, claims or finishes recorded: %v", s)
	}
	if got := s[`txbox_relay_poll_delay_seconds{event_type=order.created,route=}`]; got <= 0 || got > 0.1 {
		t.Errorf("poll delay gauge %v, want within the configured (0, 100ms]", got)
	}

	// An outage: the circuit opens, the gauge says so, and the due
	// backlog shows in the cached stats.
	snd.down.Store(true)
	storeharness.PostgresPublish(t, d, pub, txbox.Event{Type: "order.created", Payload: []byte(`{}`)})
	const circuit = `txbox_relay_circuit_state{circuit=destination,destination=topic=events.order.created,sender=bus}`
	testenv.WaitFor(t, 20*time.Second, "circuit open and the row due", func() bool {
		s := series(t, reg)
		return s[circuit] == float64(txbox.CircuitOpen) && s[`txbox_outbox_backlog{event_type=order.created,state=due}`] == 1
	})
	snd.down.Store(false)
	testenv.WaitFor(t, 20*time.Second, "circuit closed and the row sent", func() bool {
		s := series(t, reg)
		return s[circuit] == float64(txbox.CircuitClosed) && s[sent] == 6
	})
	for key := range series(t, reg) {
		if strings.Contains(key, "k0") || strings.Contains(key, "poison") {
			t.Errorf("a key or payload leaked into a label: %s", key)
		}
	}
}

// countingStats counts the stats queries.
type countingStats struct {
	store.Inspector
	n atomic.Int64
}

func (c *countingStats) OutboxInspect(ctx context.Context) ([]*store.OutboxTypeDetail, error) {
	c.n.Add(1)
	return c.Inspector.OutboxInspect(ctx)
}

func TestScrapesShareOneStatsQuery(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresDriver(t)
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	storeharness.PostgresPublish(t, d, pub, txbox.Event{Type: "a", Payload: []byte(`{}`)}, txbox.Event{Type: "a", Payload: []byte(`{}`)},
		txbox.Event{Type: "b", Payload: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)})
	src := &countingStats{Inspector: d}
	m := relayprom.New(relayprom.Options{Stats: src, StatsInterval: time.Hour})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	done := make(chan map[string]float64)
	for range 20 {
		go func() {
			mfs, err := reg.Gather()
			if err != nil {
				t.Error(err)
			}
			_ = mfs
			done <- nil
		}()
	}
	for range 20 {
		<-done
	}
	s := series(t, reg)
	if n := src.n.Load(); n != 1 {
		t.Fatalf("21 scrapes ran %d stats queries, want 1", n)
	}
	for key, want := range map[string]float64{
		`txbox_outbox_backlog{event_type=a,state=due}`:       2,
		`txbox_outbox_backlog{event_type=a,state=scheduled}`: 0,
		`txbox_outbox_backlog{event_type=b,state=due}`:       0,
		`txbox_outbox_backlog{event_type=b,state=scheduled}`: 1,
		`txbox_outbox_oldest_due_age_seconds{event_type=b}`:  0,
		`txbox_outbox_stats_queries_total{}`:                 1,
	} {
		if got, ok := s[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}

	// Past the interval the next scrape queries again, once.
	fresh := relayprom.New(relayprom.Options{Stats: src, StatsInterval: 20 * time.Millisecond})
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(fresh)
	before := src.n.Load()
	series(t, reg2)
	testenv.WaitFor(t, 10*time.Second, "a second query after the interval", func() bool {
		series(t, reg2)
		return src.n.Load() == before+2
	})
}

// failingStats fails every query.
type failingStats struct{ n atomic.Int64 }

func (f *failingStats) OutboxInspect(context.Context) ([]*store.OutboxTypeDetail, error) {
	f.n.Add(1)
	return nil, errors.New("database is down")
}

func TestFailingStatsQueryIsNotRetriedPerScrape(t *testing.T) {
	t.Parallel()
	src := &failingStats{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(relayprom.New(relayprom.Options{Stats: src, StatsInterval: time.Hour}))
	for range 5 {
		series(t, reg)
	}
	s := series(t, reg)
	if src.n.Load() != 1 || s[`txbox_outbox_stats_errors_total{}`] != 1 {
		t.Errorf("6 scrapes of a failing source: %d queries, errors counter %v; want 1 and 1", src.n.Load(), s[`txbox_outbox_stats_errors_total{}`])
	}
}

// fixedStats returns the same stats every time.
type fixedStats []*store.OutboxTypeDetail

func (f fixedStats) OutboxInspect(context.Context) ([]*store.OutboxTypeDetail, error) { return f, nil }

func TestLabelCardinalityIsBounded(t *testing.T) {
	t.Parallel()
	var stats fixedStats
	for i := range 50 {
		stats = append(stats, &store.OutboxTypeDetail{EventType: fmt.Sprint("stat.", i), Due: 1, OldestDueAge: time.Duration(i) * time.Second})
	}
	m := relayprom.New(relayprom.Options{Stats: stats, MaxTypes: 10, MaxDestinations: 3})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for i := range 1000 {
		typ := fmt.Sprint("t.", i)
		m.OnPublish(outbox.PublishEvent{Counts: map[string]int{typ: 1}})
		m.OnPoll(txbox.PollEvent{EventType: typ, Claimed: 1, Limit: 10, NextDelay: time.Millisecond})
		m.OnBatch(txbox.BatchEvent{EventType: typ, Sender: "s", Destination: fmt.Sprint("url=https://u:secret@h/", i, "?token=x"),
			Sent: 1, SendDuration: time.Millisecond})
		m.OnCircuit(txbox.CircuitEvent{Sender: "s", Destination: fmt.Sprint("q", i), State: txbox.CircuitOpen})
	}
	s := series(t, reg)
	perName := map[string]map[string]bool{}
	for key := range s {
		name, labels, _ := strings.Cut(key, "{")
		if perName[name] == nil {
			perName[name] = map[string]bool{}
		}
		perName[name][labels] = true
		if strings.Contains(key, "secret") || strings.Contains(key, "token") {
			t.Errorf("a URL credential leaked into a label: %s", key)
		}
	}
	// Destinations share one bound: batches and circuits alternated, so
	// h/0, q0 and h/1 took the 3 places.
	for name, want := range map[string]int{
		"txbox_outbox_published_total":        11, // 10 types and _other
		"txbox_relay_messages_total":          11,
		"txbox_relay_polls_total":             11,
		"txbox_relay_send_duration_seconds":   3, // h/0, h/1 and _other
		"txbox_relay_circuit_state":           2, // q0 and _other
		"txbox_outbox_backlog":                4, // _other's four states
		"txbox_outbox_oldest_due_age_seconds": 1,
	} {
		if got := len(perName[name]); got != want {
			t.Errorf("%s has %d series, want %d: %v", name, got, want, perName[name])
		}
	}
	// The first 10 types seen were the relay's; the 50 of the stats fold
	// into _other, summed, with the worst lag.
	if got := s[`txbox_outbox_backlog{event_type=_other,state=due}`]; got != 50 {
		t.Errorf("_other due backlog %v, want 50", got)
	}
	if got := s[`txbox_outbox_oldest_due_age_seconds{event_type=_other}`]; got != 49 {
		t.Errorf("_other lag %v, want the worst, 49", got)
	}
	if _, ok := s[`txbox_relay_send_duration_seconds{destination=url=https://h/0,sender=s}`]; !ok {
		t.Errorf("destination label not cleaned of credentials and query: %v", perName["txbox_relay_send_duration_seconds"])
	}
}

// TestRouteLabel: the per-type delivery metrics carry the fan-out route
// (empty for a type with one route), so each route of a fanned-out type
// has its own series; the (type, route) pairs are bounded by MaxTypes,
// and the routes of a type reported as _other are _other too.
func TestRouteLabel(t *testing.T) {
	t.Parallel()
	m := relayprom.New(relayprom.Options{MaxTypes: 3})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	feed := func(typ, route string) {
		m.OnPoll(txbox.PollEvent{EventType: typ, Route: route, Claimed: 1, Limit: 10, NextDelay: time.Second})
		m.OnBatch(txbox.BatchEvent{EventType: typ, Route: route, Sender: "s", Destination: "d", Sent: 2, Failed: 1})
	}
	// Types single, fan and t.0 take the 3 type places; (fan, kafka),
	// (fan, partner) and (fan, late) the 3 route places.
	feed("single", "")
	feed("fan", "kafka")
	feed("fan", "partner")
	feed("fan", "partner")
	feed("fan", "late")
	feed("fan", "later") // the 4th pair: beyond MaxTypes
	for i := range 5 {
		feed(fmt.Sprint("t.", i), "r") // types beyond MaxTypes: _other, their routes too
	}
	s := series(t, reg)
	for key, want := range map[string]float64{
		`txbox_relay_messages_total{event_type=single,result=sent,route=}`:           2,
		`txbox_relay_messages_total{event_type=fan,result=sent,route=kafka}`:         2,
		`txbox_relay_messages_total{event_type=fan,result=sent,route=partner}`:       4,
		`txbox_relay_messages_total{event_type=fan,result=dead_lettered,route=late}`: 1,
		`txbox_relay_messages_total{event_type=t.0,result=sent,route=_other}`:        2,
		`txbox_relay_messages_total{event_type=fan,result=sent,route=_other}`:        2,
		`txbox_relay_messages_total{event_type=_other,result=sent,route=_other}`:     8,
		`txbox_relay_failed_total{event_type=fan,route=partner}`:                     2,
		`txbox_relay_polls_total{event_type=fan,result=partial,route=kafka}`:         1,
		`txbox_relay_poll_delay_seconds{event_type=fan,route=partner}`:               1,
		`txbox_relay_claim_duration_seconds{event_type=fan,route=kafka}`:             1,
		`txbox_relay_finish_duration_seconds{event_type=single,route=}`:              1,
	} {
		if got, ok := s[key]; got != want || !ok {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	for key := range s {
		if strings.Contains(key, "route=later") || strings.Contains(key, "route=r}") || strings.Contains(key, "route=r,") {
			t.Errorf("a route beyond the bound has its own series: %s", key)
		}
	}
}
