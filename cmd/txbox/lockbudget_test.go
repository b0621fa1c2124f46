package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
)

// TestSlowBrokerDoesNotStarveThePool is the lock claim's worst case
// (docs/operations.md, "Connection pool"): ten discovered lock-mode types
// with four batches in flight each want 40 connections from a pool of 16,
// and every claimed batch holds its connection until NATS, slowed by 3s
// of latency, acknowledges it. The lock claims must queue behind their
// budget instead of taking the whole pool, so that meanwhile heartbeats
// are still written, /readyz never reports a database error (and names
// the slow sends instead), a lease-mode type still delivers, and in the
// end every event is on the stream exactly as published.
func TestSlowBrokerDoesNotStarveThePool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	pool, schema := postgresSchema(t, ctx, "slow_")
	subj := testenv.UniqueName("slow")
	stream := memoryStream(t, ctx, jetStream(t), subj)

	proxy := startSlowProxy(t, strings.TrimPrefix(testenv.NATSURL, "nats://"))
	rel := startInProcessRelay(t, ctx, fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, schema: %s, max-conns: 16 }
senders:
  main: { type: nats, url: "nats://%s" }
defaults:
  claim: lock
  in-flight: 4
  batch-size: 5
  route: { subject: "%s.{event_type}" }
  polling: { min-delay: 10ms, max-delay: 200ms }
events:
  lease-a: { claim: lease }
  lease-b: { claim: lease }
relay: { discover-interval: 100ms, discover-max-interval: 100ms, shutdown-timeout: 30s, heartbeat-interval: 1s, instance-id: slow-broker }
health: { listen: "127.0.0.1:0" }
log: { level: info }
`, testenv.PostgresURL, schema, proxy.addr(), subj))
	relayErr, readyz := rel.log, rel.readyz
	var got sync.Map // event id -> deliveries (*atomic.Int64)
	diagnose := func() {
		rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT event_type, status, count(*) FROM %s.txbox_outbox GROUP BY 1, 2 ORDER BY 1, 2`, schema))
		if err != nil {
			t.Log(err)
			return
		}
		for rows.Next() {
			var typ, status string
			var n int
			_ = rows.Scan(&typ, &status, &n)
			t.Logf("outbox %s %s: %d", typ, status, n)
		}
		rows.Close()
		n := 0
		got.Range(func(any, any) bool { n++; return true })
		t.Logf("%d distinct events consumed", n)
		if info, err := stream.Info(ctx); err == nil {
			t.Logf("stream holds %d messages", info.State.Msgs)
		}
		t.Logf("%d connections idle in transaction", idleInTransaction(t, ctx, pool, schema))
		t.Logf("relay log:\n%s", relayErr)
	}

	var mu sync.Mutex
	published := map[string]bool{}
	insert := func(eventType string, n int) []string {
		t.Helper()
		var ids []string
		for range n {
			id := txbox.NewID()
			if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload) VALUES ($1, $2, 'x')`, schema), id, eventType); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id.String())
		}
		mu.Lock()
		for _, id := range ids {
			published[id] = true
		}
		mu.Unlock()
		return ids
	}
	// One event per lock type first, delivered quickly: discovery has
	// found every type before NATS slows down.
	for i := range 10 {
		insert(fmt.Sprintf("lock-%d", i), 1)
	}
	insert("lease-a", 1)
	// The stream is read by sequence: every message it holds, once.
	var unexpected atomic.Int64
	var nextSeq uint64 = 1
	consumed := func() {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for ; nextSeq <= info.State.LastSeq; nextSeq++ {
			m, err := stream.GetMsg(ctx, nextSeq)
			if err != nil {
				t.Fatal(err)
			}
			id := m.Header.Get(txbox.HeaderEventID)
			mu.Lock()
			ok := published[id]
			mu.Unlock()
			if !ok {
				unexpected.Add(1)
			}
			v, _ := got.LoadOrStore(id, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}
	}
	delivered := func(ids []string) bool {
		for _, id := range ids {
			if _, ok := got.Load(id); !ok {
				return false
			}
		}
		return true
	}
	allPublished := func() []string {
		mu.Lock()
		defer mu.Unlock()
		ids := make([]string, 0, len(published))
		for id := range published {
			ids = append(ids, id)
		}
		return ids
	}
	testenv.WaitFor(t, 60*time.Second, "the first events of every type delivered", func() bool {
		consumed()
		return delivered(allPublished())
	})

	// NATS slows down; a backlog of 8 batches per lock type arrives.
	proxy.delay.Store(int64(3 * time.Second))
	slowFrom := time.Now()
	var backlog []string
	for i := range 10 {
		backlog = append(backlog, insert(fmt.Sprintf("lock-%d", i), 40)...)
	}

	// The probes, every 250ms until the backlog is drained.
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	var dbErrors []string
	var slowNamed atomic.Bool
	var maxIdle atomic.Int64
	var beats []time.Time
	probes.Go(func() {
		for probeCtx.Err() == nil {
			if n := idleInTransaction(t, ctx, pool, schema); int64(n) > maxIdle.Load() {
				maxIdle.Store(int64(n))
			}
			var beat time.Time
			if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT seen_at FROM %s.txbox_instance WHERE instance_id = 'slow-broker'`, schema)).Scan(&beat); err == nil {
				mu.Lock()
				if len(beats) == 0 || !beats[len(beats)-1].Equal(beat) {
					beats = append(beats, beat)
				}
				mu.Unlock()
			}
			rep, err := getReadyz(probeCtx, readyz)
			if err == nil {
				for _, r := range rep.Reasons {
					switch r.Kind {
					case txbox.ReasonDatabase:
						mu.Lock()
						dbErrors = append(dbErrors, r.Detail)
						mu.Unlock()
					case txbox.ReasonSendsOutstanding:
						slowNamed.Store(true)
					}
				}
			}
			select {
			case <-probeCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	defer func() { stopProbes(); probes.Wait() }()

	// The lock claims hold their connections.
	testenv.WaitFor(t, 30*time.Second, "lock batches waiting on NATS, idle in transaction", func() bool {
		return maxIdle.Load() >= 8
	})
	// A lease-mode type still delivers.
	leaseIDs := insert("lease-b", 3)
	leaseFrom := time.Now()
	testenv.WaitFor(t, 60*time.Second, "lease-mode events delivered while the lock types wait on NATS", func() bool {
		consumed()
		return delivered(leaseIDs)
	})
	t.Logf("lease-mode events delivered %s after their insert (NATS latency 3s)", time.Since(leaseFrom).Round(time.Millisecond))
	// Heartbeats are still written while the backlog waits on NATS.
	testenv.WaitFor(t, 60*time.Second, "three heartbeats written while NATS is slow", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, b := range beats {
			if b.After(slowFrom) {
				n++
			}
		}
		return n >= 3
	})
	if delivered(backlog) {
		t.Fatal("the backlog drained before the checks: they proved nothing about a slow broker")
	}
	// NATS recovers; everything is delivered.
	proxy.delay.Store(0)
	if !testenv.Within(2*time.Minute, 10*time.Millisecond, func() bool {
		consumed()
		return delivered(allPublished())
	}) {
		diagnose()
		t.Fatal("the backlog did not drain within 2m")
	}
	stopProbes()
	probes.Wait()
	if !slowNamed.Load() {
		t.Errorf("/readyz never named the slow sends (%s) while lock claims waited on NATS", txbox.ReasonSendsOutstanding)
	}
	mu.Lock()
	t.Logf("heartbeats seen during the slow phase: %v", beats)
	if len(dbErrors) > 0 {
		t.Errorf("/readyz reported %d database errors while the database was healthy, first: %s", len(dbErrors), dbErrors[0])
	}
	mu.Unlock()
	lost := 0
	for _, id := range allPublished() {
		if _, ok := got.Load(id); !ok {
			lost++
		}
	}
	if lost > 0 || unexpected.Load() > 0 {
		t.Errorf("delivery oracle: %d lost, %d unexpected of %d published", lost, unexpected.Load(), len(allPublished()))
	}
	t.Logf("%d events delivered, %d lock batches idle in transaction at most seen at one probe", len(allPublished()), maxIdle.Load())
	// The pool of 16 leaves 12 connections to the lock claims.
	if n := maxIdle.Load(); n > 16-relay.LockReserve {
		t.Errorf("%d lock batches held a connection at once, the budget is %d", n, 16-relay.LockReserve)
	}
	if !strings.Contains(relayErr.String(), "lock_batches=40 lock_budget=12 max_conns_needed=44") {
		t.Errorf("no warning that 10 lock types of 4 in flight need more than the pool; relay log:\n%s", relayErr)
	}
	rel.stop(t)
}

// idleInTransaction counts the relay's connections that sit idle in a
// transaction: lock-claimed batches waiting on their send.
func idleInTransaction(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE '%'||$1||'%'`, schema).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func getReadyz(ctx context.Context, url string) (txbox.HealthReport, error) {
	var rep txbox.HealthReport
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return rep, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	return rep, json.NewDecoder(resp.Body).Decode(&rep)
}

// waitForLogAddr waits for a log line matching pattern, whose first group
// is an address, and returns the address.
func waitForLogAddr(t *testing.T, log *testenv.LogBuffer, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var addr string
	testenv.WaitFor(t, 30*time.Second, "the address in the log", func() bool {
		if m := re.FindStringSubmatch(log.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return addr
}

// slowProxy forwards TCP connections to a target, holding back what the
// target sends for delay: a broker with that much latency.
type slowProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // a time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startSlowProxy(t *testing.T, target string) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

func (p *slowProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(server, client, nil) })
		p.wg.Go(func() { p.forward(client, server, &p.delay) })
	}
}

// forward copies src to dst, each chunk delay after it was read (nil: at
// once), in order, then closes both.
func (p *slowProxy) forward(dst, src net.Conn, delay *atomic.Int64) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 1024)
	p.wg.Go(func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				at := time.Now()
				if delay != nil {
					at = at.Add(time.Duration(delay.Load()))
				}
				chunks <- chunk{buf[:n], at}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range chunks {
		if wait := time.Until(c.at); wait > 0 {
			timer := time.NewTimer(wait)
			<-timer.C
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	for range chunks {
	}
}
