package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/outbox"
)

// Parking in TestChaosTenants (docs/multi-tenant.md, "Idle tenants"):
// the relays park a tenant idle for 1s and sweep the parked ones every
// 1s. The test publishes to some tenants steadily and to the others in
// bursts with pauses past the park-after, so that these park and wake
// many times during the run; two of them get plain-SQL inserts, with no
// NOTIFY, that only the sweep finds.

// chaosPublishMode is how the test publishes to a tenant.
type chaosPublishMode int

const (
	// publishSteady: a transaction every 50ms through the Go publisher
	// (with its NOTIFY); the tenant does not park.
	publishSteady chaosPublishMode = iota
	// publishBursts: bursts of 4 transactions 50ms apart through the Go
	// publisher, then a pause of 1.5s to 2.5s, past tenants-park-after.
	publishBursts
	// publishBurstsSQL: bursts as publishBursts, each transaction one
	// plain INSERT with no NOTIFY: only the parked tenants' sweep (or a
	// relay still running the tenant) finds its rows.
	publishBurstsSQL
)

func (m chaosPublishMode) String() string {
	return [...]string{"steady", "bursts", "bursts of plain SQL"}[m]
}

// chaosModes are the tenants' publish modes: two lock-claim (d1, s1)
// and two lease-claim tenants (d3, s5) steady, so that a relay stopped
// at any time holds claims of both kinds; the other lock-claim tenants
// (d2, s3, s4) and lease-claim tenants (s6, s7) in bursts, s4 and s7
// with plain SQL.
var chaosModes = map[string]chaosPublishMode{
	"d1": publishSteady, "s1": publishSteady, "d3": publishSteady, "s5": publishSteady,
	"d2": publishBursts, "s2": publishBursts, "s3": publishBursts, "s6": publishBursts,
	"s4": publishBurstsSQL, "s7": publishBurstsSQL,
}

// chaosPublisher publishes to one tenant until stopped.
type chaosPublisher struct {
	st     *config.Store
	o      *tenantOracle
	mode   chaosPublishMode
	schema string // the tenant's schema, for the plain-SQL inserts
	// gate is held during each transaction; the test holds it to pause
	// the publisher (after the transaction under way).
	gate sync.Mutex
}

// run publishes until stop is closed: transactions of 10 events, every
// fourth rolled back. It returns the error that ended it, if any.
func (p *chaosPublisher) run(ctx context.Context, stop <-chan struct{}) error {
	pub, err := outbox.NewPublisher(p.st, outbox.Config{})
	if err != nil {
		return err
	}
	for j := 0; ; j++ {
		wait := 50 * time.Millisecond
		if p.mode != publishSteady && j%4 == 0 && j > 0 {
			wait = 1500*time.Millisecond + rand.N(time.Second)
		}
		select {
		case <-stop:
			return nil
		case <-time.After(wait):
		}
		p.gate.Lock()
		if p.mode == publishBurstsSQL {
			err = p.insertSQL(ctx, j%4 != 3)
		} else {
			err = p.publish(ctx, pub, j%4 != 3)
		}
		p.gate.Unlock()
		if err != nil {
			return err
		}
	}
}

func chaosEvents() []txbox.Event {
	evs := make([]txbox.Event, 10)
	for i := range evs {
		evs[i] = txbox.Event{ID: txbox.NewID(), Type: "orders", Key: fmt.Sprintf("k%d", i%7), Payload: []byte(`{"chaos":true}`)}
	}
	return evs
}

// publish publishes one transaction with the Go publisher, committed or
// rolled back.
func (p *chaosPublisher) publish(ctx context.Context, pub *outbox.Publisher, commit bool) error {
	tx, err := p.st.Begin(ctx)
	if err != nil {
		return err
	}
	ids, err := pub.Publish(ctx, tx.Native(), chaosEvents()...)
	return p.end(ctx, tx, ids, err, commit)
}

// chaosTx is a transaction of the Go publisher's or of pgx.
type chaosTx interface {
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// end ends tx, which wrote ids unless err: rolled back on err, else
// committed or rolled back as commit says, and tells the oracle.
func (p *chaosPublisher) end(ctx context.Context, tx chaosTx, ids []txbox.ID, err error, commit bool) error {
	if err := endTx(ctx, tx, err, commit); err != nil {
		return err
	}
	p.o.published(ids, commit)
	return nil
}

// endTx ends tx: rolled back on err (returned), else committed or
// rolled back as commit says.
func endTx(ctx context.Context, tx chaosTx, err error, commit bool) error {
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		// A failed commit may have committed: the oracle cannot
		// judge these ids, and the run is not clean.
		return fmt.Errorf("end transaction: %w", err)
	}
	return nil
}

// insertSQL inserts one transaction's events with a plain INSERT (no
// NOTIFY: the tables have no notify trigger), committed or rolled back.
func (p *chaosPublisher) insertSQL(ctx context.Context, commit bool) error {
	evs := chaosEvents()
	ids, strs, keys := make([]txbox.ID, len(evs)), make([]string, len(evs)), make([]string, len(evs))
	for i, ev := range evs {
		ids[i], strs[i], keys[i] = ev.ID, ev.ID.String(), ev.Key
	}
	tx, err := p.st.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+p.schema+`.txbox_outbox (id, event_type, event_key, payload)
		SELECT i::uuid, 'orders', k, $3 FROM unnest($1::text[], $2::text[]) AS u(i, k)`, strs, keys, evs[0].Payload)
	return p.end(ctx, tx, ids, err, commit)
}

// holdAll pauses every publisher (after its transaction under way) and
// returns what resumes them.
func holdAll(pubs map[string]*chaosPublisher) (release func()) {
	var held []*chaosPublisher
	for _, p := range pubs {
		p.gate.Lock()
		held = append(held, p)
	}
	return sync.OnceFunc(func() {
		for _, p := range held {
			p.gate.Unlock()
		}
	})
}

// Log lines of the tenants' supervisor: a park, and a start, which with
// parking on is a wake (a tenant is added parked).
const (
	logParked  = `msg="tenant parked: idle"`
	logStarted = `msg="tenant started"`
)

// tenantOf is the tenant= field of a log line.
func tenantOf(line string) string {
	_, rest, ok := strings.Cut(line, " tenant=")
	if !ok {
		return ""
	}
	tn, _, _ := strings.Cut(rest, " ")
	return tn
}

// countTenantLines counts, per tenant, the lines of log with msg.
func countTenantLines(log, msg string) map[string]int {
	n := map[string]int{}
	for line := range strings.Lines(log) {
		if strings.Contains(line, msg) {
			n[tenantOf(strings.TrimSpace(line))]++
		}
	}
	return n
}

// parkEvent is a park (parked) or a start of one tenant in a relay's
// log, at the offset just past its line.
type parkEvent struct {
	at     int
	parked bool
}

// parkEvents are tenant tn's parks and starts in log, in order (a tenant
// is added parked, and parked when idle).
func parkEvents(log, tn string) []parkEvent {
	var out []parkEvent
	at := 0
	for line := range strings.Lines(log) {
		at += len(line)
		if tenantOf(strings.TrimSpace(line)) != tn {
			continue
		}
		switch {
		case strings.Contains(line, logParked) || strings.Contains(line, `msg="tenant added, parked until it has work"`):
			out = append(out, parkEvent{at, true})
		case strings.Contains(line, logStarted):
			out = append(out, parkEvent{at, false})
		}
	}
	return out
}

// wokenAfter says whether log starts tenant tn at or after offset from,
// parked at the time.
func wokenAfter(log string, from int, tn string) bool {
	parked := false
	for _, e := range parkEvents(log, tn) {
		if !e.parked && parked && e.at > from {
			return true
		}
		parked = e.parked
	}
	return false
}

// ranThrough says whether tenant tn ran (started, not parked) in log at
// offset from and stayed running to the end of log.
func ranThrough(log string, from int, tn string) bool {
	running := false
	for _, e := range parkEvents(log, tn) {
		if e.parked && e.at > from {
			return false
		}
		running = !e.parked
	}
	return running
}

// tenantLines are the lines of log from offset from on about tenant tn.
func tenantLines(log string, from int, tn string) string {
	var b strings.Builder
	for line := range strings.Lines(log[from:]) {
		if tenantOf(strings.TrimSpace(line)) == tn {
			b.WriteString(line)
		}
	}
	return b.String()
}

// parkCounts counts the parks and wakes of each tenant in the logs of
// every relay process of the run, and describes them.
func parkCounts(names []string, relays []*chaosRelay) (parks, wakes map[string]int, desc string) {
	parks, wakes = map[string]int{}, map[string]int{}
	for _, r := range relays {
		log := r.stderr.String()
		for tn, n := range countTenantLines(log, logParked) {
			parks[tn] += n
		}
		for tn, n := range countTenantLines(log, logStarted) {
			wakes[tn] += n
		}
	}
	var b strings.Builder
	names = append([]string(nil), names...)
	sort.Strings(names)
	for _, tn := range names {
		fmt.Fprintf(&b, " %s (%v) %d/%d;", tn, chaosModes[tn], parks[tn], wakes[tn])
	}
	return parks, wakes, b.String()
}
