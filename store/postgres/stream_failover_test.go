package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/pgcluster"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// The failover slot on real primaries and standbys (internal/pgcluster):
// docs/operations.md, "Failover". Each test starts a PostgreSQL 17 and an
// 18 pair: a primary and a synchronous standby with
// sync_replication_slots, synchronized_standby_slots naming its slot.

// eachFailoverVersion runs test as a parallel subtest per version with
// failover slots.
func eachFailoverVersion(t *testing.T, test func(t *testing.T, v pgcluster.Version)) {
	for _, v := range pgcluster.Versions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			test(t, v)
		})
	}
}

// failoverPair starts a primary of v and a synchronous standby set up for
// failover slots.
func failoverPair(t *testing.T, v pgcluster.Version) (p, s *pgcluster.Node) {
	t.Helper()
	p = pgcluster.Start(t, v, pgcluster.Options{})
	s = pgcluster.AddStandby(t, p, pgcluster.StandbyOptions{Synchronous: true, FailoverSlots: true})
	return p, s
}

// walDriver is a WAL-mode driver on dsn's database, migrated; its pool
// closes when the test ends.
func walDriver(t *testing.T, dsn string, wal postgres.WALConfig) *postgres.Driver {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(pool, postgres.Config{Source: postgres.SourceWAL, WAL: wal})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return d
}

// createStream runs CreateStreamWith and logs what it said.
func createStream(t *testing.T, d *postgres.Driver) *postgres.StreamSetup {
	t.Helper()
	start := time.Now()
	res, err := d.CreateStreamWith(ctxT(t), postgres.CreateStreamParams{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("CreateStreamWith: %v", err)
	}
	t.Logf("CreateStreamWith took %v (waited %v for the standbys): verdict %s: %s; notes %q; warnings %q",
		time.Since(start).Round(time.Millisecond), res.Waited.Round(time.Millisecond), res.Failover.Verdict, res.Failover.Note, res.Notes, res.Warnings)
	return res
}

// status reads d's StreamStatus.
func status(t *testing.T, d *postgres.Driver) store.StreamFailover {
	t.Helper()
	st, err := d.StreamStatus(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return st.Failover
}

// wantVerdict fails unless f has the verdict and a note or problem that
// contains each of texts.
func wantVerdict(t *testing.T, what string, f store.StreamFailover, verdict string, texts ...string) {
	t.Helper()
	all := f.Note + "\n" + strings.Join(f.Problems, "\n") + "\n" + strings.Join(f.Unchecked, "\n")
	if f.Verdict != verdict {
		t.Fatalf("%s: verdict %s, want %s: %s", what, f.Verdict, verdict, all)
	}
	for _, s := range texts {
		if !strings.Contains(all, s) {
			t.Errorf("%s: %q is not in:\n%s", what, s, all)
		}
	}
}

// setting changes a setting on n with ALTER SYSTEM and reloads; the
// setting is reset when the test ends, if n still runs.
func setting(t *testing.T, n *pgcluster.Node, name, value string) {
	t.Helper()
	n.Exec(t, "postgres", `ALTER SYSTEM SET `+name+` = '`+value+`'`)
	n.Exec(t, "postgres", `SELECT pg_reload_conf()`)
	testenv.WaitFor(t, 10*time.Second, name+" = "+value+" on "+n.Name, func() bool {
		var v string
		n.QueryRow(t, "postgres", `SELECT current_setting($1)`, []any{name}, &v)
		return v == value
	})
}

// TestFailoverSlotMigrate: migrate on a primary with a standby set up for
// failover slots creates a failover slot whose copy on the standby is
// synced and persistent when it returns, and the status says safe. The
// unsafe setups say why: synchronized_standby_slots unset on the primary,
// sync_replication_slots off on the standby; and a DSN that names only
// the primary cannot look at the standby's copy: unknown.
func TestFailoverSlotMigrate(t *testing.T) {
	t.Parallel()
	eachFailoverVersion(t, func(t *testing.T, v pgcluster.Version) {
		p, s := failoverPair(t, v)
		d := walDriver(t, pgcluster.MultiHostDSN("test", s, p), postgres.WALConfig{})
		res := createStream(t, d)
		if !res.Created || !res.Failover.Safe() || len(res.Warnings) > 0 {
			t.Fatalf("migrate: created %v, verdict %s, warnings %q", res.Created, res.Failover.Verdict, res.Warnings)
		}
		if got := s.Slot(t, d.WAL().Slot); !got.Synced || got.Temporary || !got.Failover {
			t.Fatalf("the standby's copy after migrate: %+v", got)
		}
		again := createStream(t, d) // idempotent
		if again.Created || again.FailoverChanged || !again.Failover.Safe() {
			t.Fatalf("migrate again: %+v", again)
		}
		wantVerdict(t, "status", status(t, d), store.FailoverSafe, "synced and persistent on standby1")

		single := walDriver(t, p.DSN("test"), postgres.WALConfig{})
		wantVerdict(t, "status through the primary alone", status(t, single), store.FailoverUnknown, "standby1 (slot standby1_slot) could not be read")

		setting(t, p, "synchronized_standby_slots", "")
		wantVerdict(t, "synchronized_standby_slots unset", status(t, d), store.FailoverUnsafe,
			"synchronized_standby_slots is not set on the primary", "set it to standby1_slot")
		setting(t, p, "synchronized_standby_slots", "standby1_slot")

		setting(t, s, "sync_replication_slots", "off")
		wantVerdict(t, "sync_replication_slots off", status(t, d), store.FailoverUnsafe, "sync_replication_slots is off on standby "+s.Addr())
	})
}

// keepStreaming streams d's slot as a relay would until the test ends:
// it opens the stream, lets its status sender confirm the WAL it passes,
// and opens it again when the stream ends (migrate ends its walsender to
// alter the slot). It returns how many times it opened the stream.
func keepStreaming(t *testing.T, d *postgres.Driver) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			st, err := d.OpenStream(ctx, &store.StreamOptions{StatusInterval: 100 * time.Millisecond, Window: 100})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond): // a relay's back-off before it asks for the slot again
				}
				continue
			}
			mu.Lock()
			opened++
			mu.Unlock()
			_, err = st.Next(ctx) // no event comes: returns when the stream ends
			_ = st.Close(context.Background())
			if err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "terminat") && !errors.Is(err, context.Canceled) {
				t.Logf("stream ended: %v", err)
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return opened
	}
}

// TestFailoverSlotAltered: a slot made without failover (the setting off,
// or a slot from before this release) while a relay streams it: migrate
// ends the relay's walsender, alters the slot, and waits until the
// standby's copy is persistent, which takes the relay confirming past the
// standby's catalog xmin; the relay streams again on its own.
func TestFailoverSlotAltered(t *testing.T) {
	t.Parallel()
	eachFailoverVersion(t, func(t *testing.T, v pgcluster.Version) {
		p, s := failoverPair(t, v)
		dsn := pgcluster.MultiHostDSN("test", s, p)
		off := walDriver(t, dsn, postgres.WALConfig{DisableFailover: true})
		res := createStream(t, off)
		wantVerdict(t, "migrate with failover off", res.Failover, store.FailoverUnsafe, "is not a failover slot (database.wal.failover is false)")
		slot := off.WAL().Slot
		if got := p.Slot(t, slot); got.Failover {
			t.Fatalf("failover off: the primary's slot is %+v", got)
		}
		opened := keepStreaming(t, off)
		// Transactions the slot passes, so that its catalog_xmin is
		// older than the standby's when it is altered.
		for i := 0; i < 5; i++ {
			p.Exec(t, "test", `CREATE TABLE IF NOT EXISTS pad (n int); INSERT INTO pad VALUES (1)`)
		}
		testenv.WaitFor(t, 30*time.Second, "the relay streaming", func() bool { return opened() > 0 })

		on := walDriver(t, dsn, postgres.WALConfig{})
		res = createStream(t, on)
		if !res.FailoverChanged || !res.Failover.Safe() || !strings.Contains(strings.Join(res.Notes, " "), "after ending the walsender") {
			t.Fatalf("migrate with failover on: %+v", res)
		}
		if got := s.Slot(t, slot); !got.Synced || got.Temporary || !got.Failover {
			t.Fatalf("the standby's copy after migrate: %+v", got)
		}
		testenv.WaitFor(t, 30*time.Second, "the relay streaming again", func() bool { return opened() > 1 })
	})
}

// TestFailoverSlotAdopted: a failover slot made by hand before migrate
// (the way there before this release) is adopted: the stream delivers the
// events written after migrate, and leaves the captured rows committed
// before it (after the slot was made as well as before) to the poller,
// which claims each of them once.
func TestFailoverSlotAdopted(t *testing.T) {
	t.Parallel()
	eachFailoverVersion(t, func(t *testing.T, v pgcluster.Version) {
		p, s := failoverPair(t, v)
		d := walDriver(t, pgcluster.MultiHostDSN("test", s, p), postgres.WALConfig{})
		slot := d.WAL().Slot
		p.Exec(t, "test", `INSERT INTO txbox_outbox (event_type, payload) VALUES ('before-slot', 'a')`)
		// (slot_name, plugin, temporary, twophase, failover)
		p.Exec(t, "test", `SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`, slot)
		p.Exec(t, "test", `INSERT INTO txbox_outbox (event_type, payload) VALUES ('after-slot', 'b')`)

		res := createStream(t, d)
		if !res.Adopted || res.Created || !res.Failover.Safe() || !strings.Contains(strings.Join(res.Warnings, " "), "adopted the slot "+slot) {
			t.Fatalf("migrate over a hand-made slot: %+v", res)
		}
		p.Exec(t, "test", `INSERT INTO txbox_outbox (event_type, payload) VALUES ('after-migrate', 'c')`)
		p.Exec(t, "test", `SELECT txbox_emit('emitted', 'k', 'd'::bytea)`)

		st, err := d.OpenStream(ctxT(t), &store.StreamOptions{StatusInterval: 100 * time.Millisecond, Window: 100})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close(context.Background()) })
		var got []string
		for len(got) < 2 {
			tx, err := st.Next(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range tx.Events {
				got = append(got, ev.Row.EventType)
			}
		}
		if strings.Join(got, ",") != "after-migrate,emitted" {
			t.Fatalf("the adopted slot streamed %v, want after-migrate,emitted", got)
		}
		for _, typ := range []string{"before-slot", "after-slot"} {
			if rows := claimAll(t, d, typ); len(rows) != 1 {
				t.Errorf("the poller claimed %d rows of %s, want 1", len(rows), typ)
			}
		}
		if rows := claimAll(t, d, "after-migrate"); len(rows) != 0 {
			t.Errorf("the poller claimed the stream's row of after-migrate")
		}
	})
}

// TestFailoverStreamSurvives: the relay confirms a position, the primary
// is killed (SIGKILL) and the standby promoted; on the new primary the
// slot is there, persistent, its confirmed_flush_lsn not behind the
// relay's confirm, and a stream opened through the same multi-host DSN
// delivers the events committed after that confirm, none before it.
func TestFailoverStreamSurvives(t *testing.T) {
	t.Parallel()
	eachFailoverVersion(t, func(t *testing.T, v pgcluster.Version) {
		p, s := failoverPair(t, v)
		dsn := pgcluster.MultiHostDSN("test", s, p)
		d := walDriver(t, dsn, postgres.WALConfig{})
		createStream(t, d)
		slot := d.WAL().Slot

		p.Exec(t, "test", `SELECT txbox_emit('confirmed', 'k', 'a'::bytea)`)
		st, err := d.OpenStream(ctxT(t), &store.StreamOptions{StatusInterval: 100 * time.Millisecond, Window: 100})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := st.Next(ctxT(t))
		if err != nil || tx.Events[0].Row.EventType != "confirmed" {
			t.Fatalf("first transaction %+v, %v", tx, err)
		}
		if err := st.Confirm(ctxT(t), tx.End, nil); err != nil {
			t.Fatal(err)
		}
		confirmed, synced := tx.End, time.Now()
		// The standby's copy follows the primary's slot on the sync
		// worker's next round (it naps up to 30s while nothing changes).
		testenv.WaitForEvery(t, 60*time.Second, 20*time.Millisecond, "the standby's copy at the confirmed position", func() bool {
			c := s.Slot(t, slot)
			return c.Synced && !c.Temporary && c.ConfirmedFlush != "" && lsn(t, c.ConfirmedFlush) >= confirmed
		})
		t.Logf("%v: the standby's copy reached the confirmed position %v after the confirm", v, time.Since(synced).Round(time.Millisecond))
		_ = st.Close(context.Background())
		p.Exec(t, "test", `SELECT txbox_emit('after-confirm', 'k', 'b'::bytea)`) // committed on the synchronous standby

		p.Kill(t)
		killed := time.Now()
		pgcluster.Promote(t, s)
		c := s.Slot(t, slot)
		if !c.Exists || c.Temporary || lsn(t, c.ConfirmedFlush) < confirmed {
			t.Fatalf("on the new primary the slot is %+v, want it persistent at or past %X", c, confirmed)
		}
		after := walDriver(t, dsn, postgres.WALConfig{}) // a pool of its own: the old one's connections are dead
		st2, err := after.OpenStream(ctxT(t), &store.StreamOptions{StatusInterval: 100 * time.Millisecond, Window: 100})
		if err != nil {
			t.Fatalf("open the stream on the new primary: %v", err)
		}
		t.Cleanup(func() { _ = st2.Close(context.Background()) })
		tx, err = st2.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(tx.Events) != 1 || tx.Events[0].Row.EventType != "after-confirm" || tx.End <= confirmed {
			t.Fatalf("the new primary's first transaction: %+v", tx.Events[0].Row)
		}
		t.Logf("%v: streaming from the new primary %v after the kill", v, time.Since(killed).Round(time.Millisecond))
		wantVerdict(t, "status on the new primary", status(t, after), store.FailoverNoStandby, "nothing to promote")
	})
}

// lsn parses an LSN of pg_replication_slots.
func lsn(t *testing.T, s string) uint64 {
	t.Helper()
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(l)
}

// walSchemaDriver is a migrated WAL-mode driver on a fresh schema of the
// shared server, with a slot and a publication of its own; both are
// dropped when the test ends.
func walSchemaDriver(t *testing.T) (*postgres.Driver, *pgxpool.Pool) {
	t.Helper()
	suffix := strings.TrimPrefix(testenv.UniqueName("x"), "x")
	pool := newPool(t, 4)
	d, err := postgres.New(pool, postgres.Config{Schema: newSchema(t), Source: postgres.SourceWAL,
		WAL: postgres.WALConfig{Slot: "t_slot_" + suffix, Publication: "t_pub_" + suffix}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	db := admin(t)
	t.Cleanup(func() {
		_, _ = db.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, d.WAL().Slot)
		_, _ = db.Exec(`DROP PUBLICATION IF EXISTS ` + d.WAL().Publication)
	})
	return d, pool
}

// TestFailoverOnSharedServer: on the shared server (PostgreSQL 15 in
// make test; 17 or 18 in the version matrix) migrate says what it did
// with database.wal.failover: ignored with a note before 17, a failover
// slot from 17 on; with no standby the verdict is no_standby, and on 15
// it says a promotion would lose the slot.
func TestFailoverOnSharedServer(t *testing.T) {
	t.Parallel()
	d, pool := walSchemaDriver(t)
	var version int
	if err := pool.QueryRow(ctxT(t), `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	res, err := d.CreateStreamWith(ctxT(t), postgres.CreateStreamParams{Timeout: slotCreateTimeout})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(res.Notes, "\n")
	var failover bool
	if err := pool.QueryRow(ctxT(t), `SELECT coalesce((to_jsonb(s)->>'failover')::bool, false) FROM pg_replication_slots s WHERE slot_name = $1`,
		d.WAL().Slot).Scan(&failover); err != nil {
		t.Fatal(err)
	}
	if version < 170000 {
		if !strings.Contains(notes, fmt.Sprintf("database.wal.failover is ignored: PostgreSQL %d has no failover slots (17+)", version/10000)) || failover {
			t.Errorf("PostgreSQL %d: notes %q, failover %v", version, notes, failover)
		}
		wantVerdict(t, "status", status(t, d), store.FailoverNoStandby, "keeps the slot on the primary only")
	} else if !failover || !strings.Contains(notes, "with failover = true") {
		t.Errorf("PostgreSQL %d: notes %q, failover %v", version, notes, failover)
	}
	if _, err := d.CreateStreamWith(ctxT(t), postgres.CreateStreamParams{Timeout: time.Second, RequireFailoverSafe: true}); !errors.Is(err, postgres.ErrNotFailoverSafe) ||
		!strings.Contains(err.Error(), "no_standby") {
		t.Errorf("RequireFailoverSafe without a standby: %v", err)
	}
}

// TestAdoptRefused: a slot without its state row that is not an idle
// pgoutput slot of this database is refused, with the reason and the way
// out; nothing is written.
func TestAdoptRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, make, want string
	}{
		{"another plugin", `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, "it uses the output plugin test_decoding, WAL mode needs pgoutput"},
		{"a physical slot", `SELECT pg_create_physical_replication_slot($1)`, "it is a physical slot, not a logical one"},
		{"streamed", `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, "streams it, so another program uses it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, pool := walSchemaDriver(t)
			// Making a logical slot waits for every transaction in the
			// cluster (the parallel tests' included): ctxT's minute ran
			// out once under make chaos.
			slotCtx, cancel := context.WithTimeout(context.Background(), 2*slotCreateTimeout)
			defer cancel()
			// The streamed case's walsender decodes every change of the
			// database, the parallel tests' too, with a publication that
			// must exist in the catalog as of each change: a missing one
			// ends the walsender at the first change (and the slot, idle
			// again, was adopted: a flake). An empty publication made
			// before the slot publishes nothing and keeps it streaming.
			pub := d.WAL().Slot + "_none"
			if tc.name == "streamed" {
				if _, err := pool.Exec(ctxT(t), `CREATE PUBLICATION `+pub); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP PUBLICATION IF EXISTS `+pub) })
			}
			if _, err := pool.Exec(slotCtx, tc.make, d.WAL().Slot); err != nil {
				t.Fatal(err)
			}
			if tc.name == "streamed" {
				testenv.PostgresWalsender(t, testenv.PostgresURL, d.WAL().Slot, "(proto_version '1', publication_names '"+pub+"')")
			}
			_, err := d.CreateStreamWith(slotCtx, postgres.CreateStreamParams{Timeout: slotCreateTimeout})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "pg_drop_replication_slot('"+d.WAL().Slot+"')") {
				t.Fatalf("migrate over %s: %v", tc.name, err)
			}
			var rows int
			if err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM `+d.Tables().Schema+`.txbox_wal_state`).Scan(&rows); err != nil || rows != 0 {
				t.Errorf("state rows %d (%v)", rows, err)
			}
		})
	}
}
