package storetest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

func keyed(typ, key string) *txbox.Event {
	ev := event(typ)
	ev.Key = key
	return ev
}

func testOrderedByKey(t *testing.T, e *env) {
	const typ = "seq"
	a1, a2, a3 := keyed(typ, "A"), keyed(typ, "A"), keyed(typ, "A")
	b1, b2 := keyed(typ, "B"), keyed(typ, "B")
	n1, n2 := event(typ), event(typ)
	e.publish(a1, b1, a2, n1, b2, a3, n2)
	want := func(step string, rows []*store.OutboxRow, evs ...*txbox.Event) {
		t.Helper()
		if got, w := ids(rows), sortedIDs(evs); !slices.Equal(got, w) {
			t.Fatalf("%s: claimed %v, want %v", step, got, w)
		}
	}
	first := e.claimOrdered(typ, 10)
	want("heads", first, a1, b1, n1, n2)
	if rows := e.claimOrdered(typ, 10); len(rows) != 0 {
		t.Fatalf("claimed %v while every head is in process", ids(rows))
	}
	byID := map[txbox.ID]*store.OutboxRow{}
	for _, r := range first {
		byID[r.ID] = r
	}
	// a1 acked: a2 is the new head. b1 retried: it stays the head (retries
	// keep their id), so b2 waits.
	e.finish(false, item(byID[a1.ID], store.OutcomeAcked, 0, ""), item(byID[b1.ID], store.OutcomeRetry, 0, "again"),
		item(byID[n1.ID], store.OutcomeAcked, 0, ""), item(byID[n2.ID], store.OutcomeAcked, 0, ""))
	second := e.claimOrdered(typ, 10)
	want("after ack and retry", second, a2, b1)
	byID = map[txbox.ID]*store.OutboxRow{}
	for _, r := range second {
		byID[r.ID] = r
	}
	// a2 fails: FAILED parks key A, and after the move the unresolved dead
	// letter keeps it parked.
	e.finish(false, item(byID[a2.ID], store.OutcomeFailed, 0, "poison"), item(byID[b1.ID], store.OutcomeAcked, 0, ""))
	want("a2 failed", e.claimOrdered(typ, 10), b2)
	if n := e.moveAll(); n != 1 {
		t.Fatalf("moved %d, want 1", n)
	}
	if rows := e.claimOrdered(typ, 10); len(rows) != 0 {
		t.Fatalf("parked key released: claimed %v", ids(rows))
	}
	// Unordered claims ignore keys.
	if s := e.stats(typ); s.Pending != 1 {
		t.Fatalf("pending = %d, want 1 (a3)", s.Pending)
	}
	if n, err := e.d.DeadLetterResolve(e.ctx, []txbox.ID{a2.ID}); err != nil || n != 1 {
		t.Fatalf("resolve: %d %v", n, err)
	}
	want("after resolve", e.claimOrdered(typ, 10), a3)
}

func testOrderedParkedRetry(t *testing.T, e *env) {
	const typ = "seq-retry"
	c1, c2 := keyed(typ, "C"), keyed(typ, "C")
	e.publish(c1, c2)
	rows := e.claimOrdered(typ, 10)
	if len(rows) != 1 || rows[0].ID != c1.ID {
		t.Fatalf("claimed %v, want [%s]", ids(rows), c1.ID)
	}
	e.finishAll(rows, store.OutcomeFailed, 0, "poison")
	e.moveAll()
	if rows := e.claimOrdered(typ, 10); len(rows) != 0 {
		t.Fatalf("c2 claimed while c1 is dead-lettered: %v", ids(rows))
	}
	if n, err := e.d.DeadLetterRetry(e.ctx, []txbox.ID{c1.ID}); err != nil || n != 1 {
		t.Fatalf("retry: %d %v", n, err)
	}
	rows = e.claimOrdered(typ, 10)
	if len(rows) != 1 || rows[0].ID != c1.ID {
		t.Fatalf("after retry claimed %v, want the retried head %s", ids(rows), c1.ID)
	}
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	rows = e.claimOrdered(typ, 10)
	if len(rows) != 1 || rows[0].ID != c2.ID {
		t.Fatalf("after the head was acked claimed %v, want %s", ids(rows), c2.ID)
	}
}

// testOrderedConcurrent runs 8 claimers on an ordered type: a key never has
// two rows in flight at once, and each key's rows are claimed exactly once,
// in id order.
func testOrderedConcurrent(t *testing.T, e *env) { orderedConcurrent(t, e, 1) }

// testOrderedConcurrentRuns is testOrderedConcurrent with runs of up to 3
// rows per key: a claimer holds a contiguous run of a key, and no other
// claimer holds any row of that key meanwhile.
func testOrderedConcurrentRuns(t *testing.T, e *env) { orderedConcurrent(t, e, 3) }

func orderedConcurrent(t *testing.T, e *env, run int) {
	const keys, perKey, claimers = 12, 8, 8
	var evs []*txbox.Event
	for i := range keys * perKey {
		evs = append(evs, keyed("seq-conc", fmt.Sprint("key-", i%keys)))
	}
	e.publish(evs...)
	c := &orderedClaimers{
		e: e, run: run, total: len(evs), end: time.Now().Add(deadline),
		inFlight: map[string]bool{}, order: map[string][]txbox.ID{},
	}
	together(t, claimers, func(int) error { return c.claimLoop() })
	for k, got := range c.order {
		var want []txbox.ID
		for _, ev := range evs {
			if ev.Key == k {
				want = append(want, ev.ID)
			}
		}
		slices.SortFunc(want, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
		if !slices.Equal(got, want) {
			t.Fatalf("key %s claimed in order %v, want %v", k, got, want)
		}
	}
	if len(c.order) != keys {
		t.Fatalf("claimed %d keys, want %d", len(c.order), keys)
	}
}

// orderedClaimers is the state orderedConcurrent's claimers share: which
// keys are in flight, and each key's rows in the order they were claimed.
type orderedClaimers struct {
	e          *env
	run, total int
	end        time.Time

	mu       sync.Mutex
	inFlight map[string]bool
	order    map[string][]txbox.ID
	claimed  int
}

// claimLoop is one claimer: it claims ordered runs and acks them until
// every row is claimed, the deadline passes or a check fails.
func (c *orderedClaimers) claimLoop() error {
	for {
		c.mu.Lock()
		n := c.claimed
		c.mu.Unlock()
		if n == c.total {
			return nil
		}
		if time.Now().After(c.end) {
			return fmt.Errorf("timed out with %d of %d claimed", n, c.total)
		}
		rows, err := c.e.d.OutboxClaim(c.e.ctx, &store.OutboxClaimParams{EventType: "seq-conc", Limit: 3 * c.run, LeaseDuration: longLease, OrderedByKey: true, KeyRun: c.run})
		if err != nil {
			return err
		}
		if err := c.record(rows); err != nil {
			return err
		}
		if len(rows) == 0 {
			// Every head is in flight elsewhere: poll again shortly.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		items := make([]store.OutboxFinishItem, len(rows))
		for i, r := range rows {
			items[i] = item(r, store.OutcomeAcked, 0, "")
		}
		if _, err := c.e.d.OutboxFinish(c.e.ctx, &store.OutboxFinishParams{Items: items}); err != nil {
			return err
		}
	}
}

// record checks one claim (a key's run in key order and within the run
// limit, no key in flight in two claims) and appends its rows to their
// keys' claim order.
func (c *orderedClaimers) record(rows []*store.OutboxRow) error {
	// Within one claim a key's run is in key order.
	mine := map[string][]*store.OutboxRow{}
	for _, r := range rows {
		mine[r.Key] = append(mine[r.Key], r)
	}
	for _, rs := range mine {
		// A key's order is (Seq, ID): the dialect's order key first.
		slices.SortFunc(rs, func(a, b *store.OutboxRow) int {
			return cmp.Or(cmp.Compare(a.Seq, b.Seq), bytes.Compare(a.ID[:], b.ID[:]))
		})
		if len(rs) > c.run {
			return fmt.Errorf("key %s: %d rows in one claim, run limit %d", rs[0].Key, len(rs), c.run)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, rs := range mine {
		if c.inFlight[k] {
			return fmt.Errorf("key %s has rows in flight in two claims", k)
		}
		c.inFlight[k] = true
		for _, r := range rs {
			c.order[k] = append(c.order[k], r.ID)
			c.claimed++
		}
	}
	// Leave the flight before the finish commits: the next row of the key
	// cannot be claimed until it has.
	for _, r := range rows {
		delete(c.inFlight, r.Key)
	}
	return nil
}

// testOrderedRuns: with KeyRun, one claim takes a key's head and the rows
// right behind it, stopping at the run limit, the batch limit, the first
// row that is not due, and never past a blocked head.
func testOrderedRuns(t *testing.T, e *env) {
	const typ = "seq-run"
	a := []*txbox.Event{keyed(typ, "A"), keyed(typ, "A"), keyed(typ, "A"), keyed(typ, "A"), keyed(typ, "A")}
	b := []*txbox.Event{keyed(typ, "B"), keyed(typ, "B")}
	n := event(typ)
	e.publish(append(append(append([]*txbox.Event{}, a...), b...), n)...)
	want := func(step string, rows []*store.OutboxRow, evs ...*txbox.Event) {
		t.Helper()
		if got, w := sortedIDs(rowEvents(rows)), sortedIDs(evs); !slices.Equal(got, w) {
			t.Fatalf("%s: claimed %v, want %v", step, got, w)
		}
	}
	// The batch limit cuts a run, never in its middle: 2 rows of one key
	// are its first two.
	first := e.claimRun(typ, 2, 3)
	if len(first) != 2 {
		t.Fatalf("limit 2: claimed %d rows", len(first))
	}
	for _, r := range first {
		if r.Key == "A" && r.ID != a[0].ID && r.ID != a[1].ID {
			t.Fatalf("limit 2: claimed %s of key A, not one of its first two rows", r.ID)
		}
		if r.Key == "B" && r.ID != b[0].ID && r.ID != b[1].ID {
			t.Fatalf("limit 2: claimed %s of key B, not one of its first two rows", r.ID)
		}
	}
	e.finishAll(first, store.OutcomeReleased, 0, "")
	rows := e.claimRun(typ, 10, 3)
	want("runs of 3", rows, a[0], a[1], a[2], b[0], b[1], n)
	if more := e.claimRun(typ, 10, 3); len(more) != 0 {
		t.Fatalf("claimed %v while every key's run is in process", ids(more))
	}
	byID := map[txbox.ID]*store.OutboxRow{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	// a0 acked, a1 retried much later, a2 released unsent: a1 is the head
	// again and not due, so nothing of A is claimable.
	e.finish(false, item(byID[a[0].ID], store.OutcomeAcked, 0, ""), item(byID[a[1].ID], store.OutcomeRetry, time.Hour, "no"),
		item(byID[a[2].ID], store.OutcomeReleased, 0, ""), item(byID[b[0].ID], store.OutcomeAcked, 0, ""),
		item(byID[b[1].ID], store.OutcomeAcked, 0, ""), item(byID[n.ID], store.OutcomeAcked, 0, ""))
	if more := e.claimRun(typ, 10, 3); len(more) != 0 {
		t.Fatalf("claimed %v while key A's head waits for its retry", ids(more))
	}
	// A row that is not due yet ends the run, and blocks the rows behind it.
	c1, c2, c3 := keyed(typ, "C"), keyed(typ, "C"), keyed(typ, "C")
	c2.NotBefore = time.Now().Add(time.Hour)
	e.publish(c1, c2, c3)
	want("run up to a row not due", e.claimRun(typ, 10, 3), c1)
	if more := e.claimRun(typ, 10, 3); len(more) != 0 {
		t.Fatalf("claimed %v behind a row that is not due", ids(more))
	}
}

func rowEvents(rows []*store.OutboxRow) []*txbox.Event {
	out := make([]*txbox.Event, len(rows))
	for i, r := range rows {
		out[i] = &txbox.Event{ID: r.ID}
	}
	return out
}

// testOrderedHotKey: a key whose head is in flight with many rows behind
// it blocks only itself; the other keys' heads and the keyless rows are
// claimed, however the blocked rows sort in the claim index.
func testOrderedHotKey(t *testing.T, e *env) {
	const typ = "seq-hot"
	hot := make([]*txbox.Event, 300)
	for i := range hot {
		hot[i] = keyed(typ, "hot")
	}
	e.publish(hot...)
	if rows := e.claimRun(typ, 1, 1); len(rows) != 1 || rows[0].ID != hot[0].ID {
		t.Fatalf("claimed %v, want the hot key's head %s", ids(rows), hot[0].ID)
	}
	var others []*txbox.Event
	for i := range 5 {
		others = append(others, keyed(typ, fmt.Sprint("k", i)), keyed(typ, fmt.Sprint("k", i)))
	}
	n := event(typ)
	e.publish(append(others, n)...)
	var heads []*txbox.Event
	for i := 0; i < len(others); i += 2 {
		heads = append(heads, others[i])
	}
	// The first claim takes every other key's head, also when it starts
	// at the first key, the blocked one (a driver with no cursor yet).
	fresh, err := e.h.Open(t, e.ns, "")
	if err != nil {
		t.Fatal(err)
	}
	first, err := fresh.OutboxClaim(e.ctx, &store.OutboxClaimParams{EventType: typ, Limit: 10, LeaseDuration: longLease, OrderedByKey: true, KeyRun: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := map[txbox.ID]bool{}
	for _, r := range first {
		if r.Key == "hot" {
			t.Fatalf("claimed %s of the hot key while its head is in process", r.ID)
		}
		got[r.ID] = true
	}
	for _, ev := range heads {
		if !got[ev.ID] {
			t.Fatalf("head %s of key %q not in a fresh driver's first claim behind a blocked hot key; claimed %d rows", ev.ID, ev.Key, len(got))
		}
	}
	e.finishAll(first, store.OutcomeReleased, 0, "")
	got = map[txbox.ID]bool{}
	for _, r := range e.claimRun(typ, 10, 1) {
		got[r.ID] = true
	}
	for _, ev := range heads {
		if !got[ev.ID] {
			t.Fatalf("head %s of key %q not in the first claim behind a blocked hot key; claimed %d rows", ev.ID, ev.Key, len(got))
		}
	}
	// The keyless row sorts after 300 blocked rows: it is claimed once the
	// dialect's search for keyless rows gets past them, within one claim per
	// batch-size blocked rows (docs/schema/postgres.md, "Ordered claim").
	for claim := 0; !got[n.ID]; claim++ {
		if claim > len(hot)/10+5 {
			t.Fatalf("keyless row %s not claimed after %d claims behind %d blocked rows", n.ID, claim, len(hot))
		}
		for _, r := range e.claimRun(typ, 10, 1) {
			if r.Key == "hot" {
				t.Fatalf("claimed %s of the hot key while its head is in process", r.ID)
			}
			got[r.ID] = true
		}
	}
	if len(got) != len(heads)+1 {
		t.Fatalf("claimed %d rows, want the %d heads and the keyless row", len(got), len(heads))
	}
}

// testOrderedFairness: with more keys than a claim takes, successive
// claims serve every key before any key gets its next row (each key's
// rows are acked at once, so its next row is claimable right away).
func testOrderedFairness(t *testing.T, e *env) {
	const typ, keys, limit = "seq-fair", 30, 10
	var evs []*txbox.Event
	for range 3 {
		for k := range keys {
			evs = append(evs, keyed(typ, fmt.Sprintf("key-%02d", k)))
		}
	}
	e.publish(evs...)
	seen := map[string]int{}
	for claim := range keys / limit {
		rows := e.claimRun(typ, limit, 1)
		if len(rows) != limit {
			t.Fatalf("claim %d took %d rows, want %d", claim, len(rows), limit)
		}
		for _, r := range rows {
			seen[r.Key]++
		}
		e.finishAll(rows, store.OutcomeAcked, 0, "")
	}
	if len(seen) != keys {
		t.Fatalf("%d claims of %d served %d keys, want all %d (some key got a second row first): %v", keys/limit, limit, len(seen), keys, seen)
	}
}

// testOrderedKeylessBehindParked: rows without a key are unordered, so a
// parked key's backlog in front of them in due order must not hold them
// back, nor a window of keyed rows that are all blocked.
func testOrderedKeylessBehindParked(t *testing.T, e *env) {
	const typ = "seq-parked"
	head := e.deadLetter(typ, "P", "poison")
	var parked []*txbox.Event
	for range 40 {
		parked = append(parked, keyed(typ, "P"))
	}
	e.publish(parked...)
	loose := []*txbox.Event{event(typ), event(typ), event(typ)}
	e.publish(loose...)
	got := map[txbox.ID]bool{}
	for claim := 0; len(got) < len(loose); claim++ {
		if claim == 20 {
			t.Fatalf("after %d claims of 5, %d of %d keyless rows claimed behind a parked key", claim, len(got), len(loose))
		}
		for _, r := range e.claimRun(typ, 5, 2) {
			if r.Key != "" {
				t.Fatalf("claimed %s of parked key %q (head %s is dead-lettered)", r.ID, r.Key, head)
			}
			got[r.ID] = true
		}
	}
}

func testOrderedBadRun(t *testing.T, e *env) {
	_, err := e.d.OutboxClaim(e.ctx, &store.OutboxClaimParams{EventType: "seq-bad", Limit: 1, LeaseDuration: time.Minute, OrderedByKey: true, KeyRun: -1})
	if !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("KeyRun -1: %v, want store.ErrInvalidParams", err)
	}
}
