package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

func (e *env) inspector() store.Inspector {
	e.t.Helper()
	in, ok := e.d.(store.Inspector)
	if !ok {
		e.t.Fatalf("%T does not implement store.Inspector", e.d)
	}
	return in
}

func (e *env) instances() store.Instances {
	e.t.Helper()
	in, ok := e.d.(store.Instances)
	if !ok {
		e.t.Fatalf("%T does not implement store.Instances", e.d)
	}
	return in
}

func (e *env) detail(typ string) store.OutboxTypeDetail {
	e.t.Helper()
	all, err := e.inspector().OutboxInspect(e.ctx)
	if err != nil {
		e.t.Fatalf("inspect: %v", err)
	}
	for i, d := range all {
		if i > 0 && all[i-1].EventType >= d.EventType {
			e.t.Fatalf("inspect not sorted by type: %q then %q", all[i-1].EventType, d.EventType)
		}
	}
	for _, d := range all {
		if d.EventType == typ {
			return *d
		}
	}
	return store.OutboxTypeDetail{EventType: typ}
}

// testInspect: the backlog splits into due and scheduled rows; lag is the
// age of the oldest due row only; retries show in the attempts histogram,
// the next due time and the last error.
func testInspect(t *testing.T, e *env) {
	const typ = "inspect"
	created := time.Now()
	due := events(typ, 4)
	later := events(typ, 2)
	for _, ev := range later {
		ev.NotBefore = time.Now().Add(time.Hour)
	}
	e.publish(append(due, later...)...)
	rows := e.claim(typ, 2, longLease)
	if len(rows) != 2 {
		t.Fatalf("claimed %d, want 2", len(rows))
	}
	e.finishAll(rows[:1], store.OutcomeRetry, 30*time.Minute, "boom: 503 from the broker")
	// A type with only a scheduled row has no lag.
	sched := event("inspect-later")
	sched.NotBefore = time.Now().Add(time.Hour)
	e.publish(sched)
	// And one failed row of a third type.
	e.publish(event("inspect-failed"))
	e.finishAll(e.claim("inspect-failed", 1, longLease), store.OutcomeFailed, 0, "rejected")

	waitUntil(created.Add(20 * time.Millisecond))
	d := e.detail(typ)
	if d.Due != 2 || d.Scheduled != 3 || d.InProcess != 1 || d.Failed != 0 {
		t.Fatalf("backlog = due %d scheduled %d in-process %d failed %d, want 2 3 1 0", d.Due, d.Scheduled, d.InProcess, d.Failed)
	}
	if d.OldestDueAge < 10*time.Millisecond || d.OldestDueAge > time.Since(created)+time.Second {
		t.Fatalf("oldest due age %s, want about %s", d.OldestDueAge, time.Since(created))
	}
	if d.NextDueIn < 20*time.Minute || d.NextDueIn > 31*time.Minute {
		t.Fatalf("next due in %s, want the retry's ~30m", d.NextDueIn)
	}
	if d.Attempts[0] != 5 || d.Attempts[1] != 1 {
		t.Fatalf("attempts histogram %v, want 5 rows at 0 and 1 at 1", d.Attempts)
	}
	if d.LastError != "boom: 503 from the broker" {
		t.Fatalf("last error %q", d.LastError)
	}
	l := e.detail("inspect-later")
	if l.Due != 0 || l.Scheduled != 1 || l.OldestDueAge != 0 || l.NextDueIn < 50*time.Minute {
		t.Fatalf("scheduled-only type: %+v, want no lag and next due in ~1h", l)
	}
	f := e.detail("inspect-failed")
	if f.Failed != 1 || f.Due != 0 || f.Attempts[1] != 1 || f.LastError != "rejected" {
		t.Fatalf("failed type: %+v", f)
	}
	// Rows acknowledged and kept for retention are not backlog.
	e.finishAll(rows[1:], store.OutcomeAcked, 0, "")
	if d := e.detail(typ); d.InProcess != 0 || d.Due != 2 {
		t.Fatalf("after the ack: %+v", d)
	}
}

// testParkedKeys: each key with unresolved dead letters is listed once,
// with its oldest dead letter and the rows waiting behind it; resolving
// releases it.
func testParkedKeys(t *testing.T, e *env) {
	in := e.inspector()
	first := e.deadLetter("parked", "k1", "first failure")
	e.deadLetter("parked", "k1", "second failure")
	other := e.deadLetter("parked", "k2", "x")
	e.deadLetter("parked-other", "k1", "y")
	e.deadLetter("parked", "", "keyless is never parked")
	waiting := events("parked", 3)
	for _, ev := range waiting {
		ev.Key = "k1"
	}
	e.publish(waiting...)

	got, err := in.DeadLetterParkedKeys(e.ctx, &store.ParkedKeysParams{EventType: "parked", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != "k1" || got[1].Key != "k2" {
		t.Fatalf("parked keys %+v, want k1 and k2", got)
	}
	if p := got[0]; p.DeadLetterID != first || p.DeadLetters != 2 || p.Waiting != 3 || p.LastError != "first failure" || p.FailedAt.IsZero() {
		t.Fatalf("k1 = %+v, want dead letter %s (the oldest), 2 dead letters, 3 waiting", p, first)
	}
	if got[1].DeadLetterID != other || got[1].Waiting != 0 {
		t.Fatalf("k2 = %+v", got[1])
	}
	all, err := in.DeadLetterParkedKeys(e.ctx, &store.ParkedKeysParams{Limit: 10})
	if err != nil || len(all) != 3 || all[2].EventType != "parked-other" {
		t.Fatalf("every type: %+v, %v", all, err)
	}
	if lim, err := in.DeadLetterParkedKeys(e.ctx, &store.ParkedKeysParams{Limit: 1}); err != nil || len(lim) != 1 {
		t.Fatalf("limit 1: %d, %v", len(lim), err)
	}
	if n, err := e.d.DeadLetterResolve(e.ctx, []txbox.ID{other}); err != nil || n != 1 {
		t.Fatalf("resolve: %d, %v", n, err)
	}
	got, err = in.DeadLetterParkedKeys(e.ctx, &store.ParkedKeysParams{EventType: "parked", Limit: 10})
	if err != nil || len(got) != 1 || got[0].Key != "k1" {
		t.Fatalf("after resolving k2: %+v, %v", got, err)
	}
	if _, err := in.DeadLetterParkedKeys(e.ctx, &store.ParkedKeysParams{}); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("limit 0: %v, want ErrInvalidParams", err)
	}
}

// testInstances: heartbeats create and refresh one row per instance;
// expiry is judged on the database clock; removal and bad parameters.
func testInstances(t *testing.T, e *env) {
	in := e.instances()
	beat := func(id string, ttl time.Duration, info string) {
		t.Helper()
		if err := in.InstanceHeartbeat(e.ctx, &store.InstanceHeartbeatParams{ID: id, TTL: ttl, Info: info}); err != nil {
			t.Fatalf("heartbeat %s: %v", id, err)
		}
	}
	list := func() map[string]*store.Instance {
		t.Helper()
		all, err := in.InstanceList(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*store.Instance{}
		for _, x := range all {
			m[x.ID] = x
		}
		return m
	}
	start := time.Now()
	beat("relay-a", time.Hour, "v1 on host-a")
	beat("relay-b", time.Second, "v1 on host-b")
	m := list()
	if len(m) != 2 || m["relay-a"].Info != "v1 on host-a" || m["relay-a"].Expired || m["relay-b"].Expired {
		t.Fatalf("instances %+v", m)
	}
	a := *m["relay-a"]
	if a.StartedAt.IsZero() || a.SeenAt.Before(a.StartedAt) || a.SeenAgo < 0 || a.SeenAgo > time.Minute {
		t.Fatalf("relay-a times: %+v", a)
	}
	// A second beat refreshes seen_at and info but keeps started_at.
	waitUntil(start.Add(20 * time.Millisecond))
	beat("relay-a", time.Hour, "v2 on host-a")
	a2 := list()["relay-a"]
	if !a2.StartedAt.Equal(a.StartedAt) || !a2.SeenAt.After(a.SeenAt) || a2.Info != "v2 on host-a" {
		t.Fatalf("after the second beat: %+v, first %+v", a2, a)
	}
	// relay-b's one-second heartbeat runs out on the database clock.
	eventually(t, "relay-b expired", func() bool { return list()["relay-b"].Expired })
	if list()["relay-a"].Expired {
		t.Fatal("relay-a expired with an hour to go")
	}
	if err := in.InstanceRemove(e.ctx, "relay-b"); err != nil {
		t.Fatal(err)
	}
	if m := list(); len(m) != 1 || m["relay-b"] != nil {
		t.Fatalf("after remove: %+v", m)
	}
	hostile := `x"; DROP TABLE t;--` + strings.Repeat("é", 20)
	beat(hostile, time.Minute, "nul\x00byte")
	if m := list(); m[strings.ReplaceAll(hostile, "\x00", "")] == nil {
		t.Fatalf("hostile id not stored as given: %+v", m)
	}
	for _, p := range []*store.InstanceHeartbeatParams{
		nil, {ID: "", TTL: time.Minute}, {ID: strings.Repeat("x", store.MaxInstanceIDLength+1), TTL: time.Minute},
		{ID: "x", TTL: time.Millisecond}, {ID: "x", TTL: time.Minute, Info: strings.Repeat("i", store.MaxInstanceInfoLength+1)},
	} {
		if err := in.InstanceHeartbeat(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("heartbeat %+v: %v, want ErrInvalidParams", p, err)
		}
	}
}
