package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/postgres"
)

// TestOrderedChaosPlainSQLProducer: several relay processes deliver an
// ordered type (ordering: key, 32 keys) written by a plain-SQL producer,
// one event per transaction and no NOTIFY, while relays are SIGKILLed and
// replaced. The per-key oracle must show order held (each key's events
// first arrive in id order; a killed relay's unfinished batch may arrive
// again, after its lease), nothing lost, nothing unexpected, and the
// backlog drained within the lease + 10 s after the producer stops. The
// default run produces for 4 s and kills a relay 0.5 s before the end;
// TXBOX_CHAOS=1 produces for 30 s and kills a relay every 2 s. It runs
// with both claim modes.
func TestOrderedChaosPlainSQLProducer(t *testing.T) {
	t.Parallel()
	produce, killEvery := 4*time.Second, 2*time.Second
	if os.Getenv("TXBOX_CHAOS") != "" {
		produce = 30 * time.Second
	}
	for _, kind := range []storeKind{postgresKind, lockKind(postgresKind)} {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			orderedChaos(t, kind, produce, killEvery)
		})
	}
}

// orderedChaos is TestOrderedChaosPlainSQLProducer on kind.
func orderedChaos(t *testing.T, kind storeKind, produce, killEvery time.Duration) {
	const (
		keys   = 32
		lease  = 2 * time.Second
		relays = 3
	)
	ns := kind.newNamespace(t)
	st := newStream(t)
	// A destination with a few milliseconds of latency per wave keeps
	// batches in flight, so a SIGKILL lands on rows that were claimed and
	// partly sent.
	env := []string{envLease + "=" + lease.String(), envOrdering + "=key", envDelay + "=5ms"}
	children := make([]*child, relays)
	for i := range children {
		children[i] = startChild(t, kind, ns, st.prefix, 0, env...)
	}
	d := openStore(t, kind, ns, 6).(*postgres.Driver)
	o := newOracle()
	var (
		mu    sync.Mutex
		keyOf = map[txbox.ID]string{}
	)
	// The plain-SQL producer: four connections, each inserting one event
	// per statement (autocommit), up to 250 events/s each. Each key belongs
	// to one connection: ids (made by the table's default) are in commit
	// order only within one session, and events of one key written
	// concurrently by two sessions have no order to keep.
	q := fmt.Sprintf(`INSERT INTO %s.txbox_outbox (event_type, event_key, payload) VALUES ('orders', $1, '{}') RETURNING id`, ns)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(4 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				k := fmt.Sprintf("k%02d", (4*i+w)%keys) // keys ≡ w (mod 4)
				var id txbox.ID
				if err := d.Pool().QueryRow(context.Background(), q, k).Scan(&id); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				keyOf[id] = k
				mu.Unlock()
				o.committedIDs(id)
			}
		}()
	}
	kills := 0
	end := time.Now().Add(produce)
	first := time.Now().Add(killEvery / 2)
	if os.Getenv("TXBOX_CHAOS") == "" {
		// One kill shortly before the producer stops: the killed relay's
		// rows are still leased when it stops, so the drain includes
		// waiting out the lease.
		first = end.Add(-500 * time.Millisecond)
	}
	for next := first; time.Now().Before(end); next = next.Add(killEvery) {
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait) // pacing the kills, not waiting for an effect
		}
		if !time.Now().Before(end) {
			break
		}
		i := kills % relays
		if err := children[i].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-children[i].done
		kills++
		children[i] = startChild(t, kind, ns, st.prefix, 0, env...)
		if os.Getenv("TXBOX_CHAOS") == "" {
			time.Sleep(time.Until(end)) // one kill in the short run
			break
		}
	}
	close(stop)
	wg.Wait()
	stopped := time.Now()
	select {
	case err := <-errs:
		t.Fatalf("producer: %v", err)
	default:
	}
	want := uint64(o.expected())
	testenv.WaitFor(t, lease+10*time.Second, "backlog drained within the lease + 10s after the producer stopped", func() bool { return outboxSettled(t, d) })
	drained := time.Since(stopped)
	for _, c := range children {
		c.stop(t)
	}
	msgs := st.readAll(t)
	firstSeen := map[txbox.ID]bool{}
	last := map[string]txbox.ID{}
	violations := 0
	for _, m := range msgs {
		o.receivedIDs(m.id)
		if firstSeen[m.id] {
			continue // a redelivery of a batch whose relay was killed
		}
		firstSeen[m.id] = true
		k := keyOf[m.id]
		if prev, ok := last[k]; ok && bytes.Compare(prev[:], m.id[:]) > 0 {
			violations++
			if violations <= 3 {
				t.Errorf("key %s: %s first arrived after %s, which has a larger id", k, m.id, prev)
			}
		}
		last[k] = m.id
	}
	rep := o.report()
	t.Logf("%d events over %d keys, %d relays, %d SIGKILLs; drained %v after the producer stopped; oracle: %v",
		want, keys, relays, kills, drained.Round(time.Millisecond), rep)
	if violations > 0 {
		t.Errorf("%d per-key order violations", violations)
	}
	if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 {
		t.Errorf("oracle: %v", rep)
	}
	if kills == 0 {
		t.Error("no relay was killed: the test did not test anything")
	}
}
