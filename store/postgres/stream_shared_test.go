package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// openSharedWAL migrates n schemas sharing one slot and publication
// (WALConfig.Shared), the first creating the slot and the others joining
// it.
func openSharedWAL(t *testing.T, n int) []*walEnv {
	t.Helper()
	suffix := strings.TrimPrefix(testenv.UniqueName("x"), "x")
	slot, pub := "t_sslot_"+suffix, "t_spub_"+suffix
	db := admin(t)
	t.Cleanup(func() {
		_, _ = db.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
		_, _ = db.Exec(`DROP PUBLICATION IF EXISTS ` + pub)
	})
	var envs []*walEnv
	for range n {
		schema := newSchema(t)
		pool := newPool(t, 10)
		d, err := postgres.New(pool, postgres.Config{Schema: schema, Source: postgres.SourceWAL,
			WAL: postgres.WALConfig{Slot: slot, Publication: pub, Shared: true}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), slotCreateTimeout+10*time.Second)
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := d.CreateStream(ctx, slotCreateTimeout); err != nil {
			t.Fatal(err)
		}
		cancel()
		envs = append(envs, &walEnv{d: d, pool: pool, schema: schema, slot: slot, outbox: pgx.Identifier{schema, "txbox_outbox"}.Sanitize()})
	}
	return envs
}

// TestSharedSlotSchemas: three schemas on one slot. Each view gets its
// own events only (a transaction that wrote into all three reaches each
// as its own part, with the same End); one schema's confirm does not move
// the slot past another's unconfirmed transaction; a view that attaches
// behind the stream gets its events; after every view closed, reopening
// redelivers exactly what was not confirmed; a schema whose view left
// holds the slot at its persisted position while the others confirm past
// it, and gets what was emitted into it meanwhile when it comes back.
func TestSharedSlotSchemas(t *testing.T) {
	envs := openSharedWAL(t, 3)
	a, b, c := envs[0], envs[1], envs[2]
	ctx := context.Background()
	opts := &store.StreamOptions{StatusInterval: 50 * time.Millisecond}
	sa, err := a.d.OpenStream(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.d.OpenStream(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.d.OpenStream(ctx, opts); !errors.Is(err, store.ErrStreamBusy) {
		t.Fatalf("a second stream of one schema: %v, want ErrStreamBusy", err)
	}

	a1, a2, b1, c1, b2 := newEmitted("a.one", "k"), newEmitted("a.two", "k"), newEmitted("b.one", "k"), newEmitted("c.one", "k"), newEmitted("b.two", "k")
	a.emit(t, a.pool, a1, true, a.prefix())
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.emit(t, tx, a2, true, a.prefix())
	b.emit(t, tx, b1, true, b.prefix())
	c.emit(t, tx, c1, true, c.prefix())
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.capture(t, b.pool, b2)

	ta1 := next(t, sa)
	wantTx(t, ta1, []bool{false}, a1)
	ta2 := next(t, sa)
	wantTx(t, ta2, []bool{false}, a2)
	tb1 := next(t, sb)
	wantTx(t, tb1, []bool{false}, b1)
	if tb1.End != ta2.End {
		t.Errorf("b's part of the shared transaction ends at %s, a's at %s", pglogrepl.LSN(tb1.End), pglogrepl.LSN(ta2.End))
	}
	tb2 := next(t, sb)
	wantTx(t, tb2, []bool{true}, b2)

	// c attaches behind the stream: the connection restarts, and c gets
	// its part while a and b get nothing twice.
	sc, err := c.d.OpenStream(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	tc1 := next(t, sc)
	wantTx(t, tc1, []bool{false}, c1)

	// a and c confirm everything, b only its first: the slot moves to
	// b's confirm and no further.
	for _, cf := range []struct {
		s   store.Stream
		end uint64
	}{{sa, ta2.End}, {sc, tc1.End}, {sb, tb1.End}} {
		if err := cf.s.Confirm(ctx, cf.end, nil); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the slot at b's confirm", func() bool { return slotFlushed(t, a) >= tb1.End })
	if f := slotFlushed(t, a); f >= tb2.End {
		t.Fatalf("the slot is at %s, past b's unconfirmed transaction at %s", pglogrepl.LSN(f), pglogrepl.LSN(tb2.End))
	}

	for _, s := range []store.Stream{sa, sb, sc} {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Reopened: b gets its unconfirmed transaction again, a and c only
	// what is new.
	a3, c2 := newEmitted("a.three", "k"), newEmitted("c.two", "k")
	a.emit(t, a.pool, a3, true, a.prefix())
	c.emit(t, c.pool, c2, true, c.prefix())
	var sb2, sa2, sc2 store.Stream
	testenv.WaitFor(t, 30*time.Second, "the slot free again", func() bool {
		sb2, err = b.d.OpenStream(ctx, opts)
		return err == nil
	})
	t.Cleanup(func() { _ = sb2.Close(context.Background()) })
	wantTx(t, next(t, sb2), []bool{true}, b2)
	if sa2, err = a.d.OpenStream(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sa2.Close(context.Background()) })
	if sc2, err = c.d.OpenStream(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc2.Close(context.Background()) })
	wantTx(t, next(t, sa2), []bool{false}, a3)
	tc2 := next(t, sc2)
	wantTx(t, tc2, []bool{false}, c2)
	b3 := newEmitted("b.three", "k")
	b.emit(t, b.pool, b3, true, b.prefix())
	tb3 := next(t, sb2)
	wantTx(t, tb3, []bool{false}, b3)

	// c confirms and leaves; what is emitted into its schema meanwhile
	// holds the slot back while a and b confirm past it, and reaches c
	// when it comes back.
	if err := sc2.Confirm(ctx, tc2.End, nil); err != nil {
		t.Fatal(err)
	}
	if err := sc2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c3, a4 := newEmitted("c.three", "k"), newEmitted("a.four", "k")
	c.emit(t, c.pool, c3, true, c.prefix())
	a.emit(t, a.pool, a4, true, a.prefix())
	ta4 := next(t, sa2)
	wantTx(t, ta4, []bool{false}, a4)
	if err := sb2.Confirm(ctx, tb3.End, nil); err != nil {
		t.Fatal(err)
	}
	if err := sa2.Confirm(ctx, ta4.End, nil); err != nil {
		t.Fatal(err)
	}
	var cLSN string
	if err := c.pool.QueryRow(ctx, `SELECT confirmed_lsn::text FROM `+pgx.Identifier{c.schema, "txbox_wal_state"}.Sanitize()+` WHERE slot_name = $1`, c.slot).Scan(&cLSN); err != nil {
		t.Fatal(err)
	}
	cPos, err := pglogrepl.ParseLSN(cLSN)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the slot at c's persisted position", func() bool { return slotFlushed(t, a) >= uint64(cPos) })
	if f := slotFlushed(t, a); f > uint64(cPos) {
		t.Fatalf("the slot is at %s, past c's position %s and its event emitted while it was away", pglogrepl.LSN(f), cPos)
	}
	sc3, err := c.d.OpenStream(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc3.Close(context.Background()) })
	wantTx(t, next(t, sc3), []bool{false}, c3)
}

// TestSharedSlotConnectionLost: the shared connection ending (its
// walsender terminated) ends every view's stream with the error; the
// views open again, a new connection starts, and each gets what it had
// not confirmed, once.
func TestSharedSlotConnectionLost(t *testing.T) {
	envs := openSharedWAL(t, 2)
	a, b := envs[0], envs[1]
	ctx := context.Background()
	opts := &store.StreamOptions{StatusInterval: 50 * time.Millisecond}
	var views []store.Stream
	for _, e := range envs {
		s, err := e.d.OpenStream(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, s)
	}
	a1, b1 := newEmitted("a.one", "k"), newEmitted("b.one", "k")
	a.emit(t, a.pool, a1, true, a.prefix())
	b.emit(t, b.pool, b1, true, b.prefix())
	wantTx(t, next(t, views[0]), []bool{false}, a1)
	wantTx(t, next(t, views[1]), []bool{false}, b1)
	pid := views[0].ServerPID()
	if pid == 0 || views[1].ServerPID() != pid {
		t.Fatalf("the views' server pids %d and %d, want one walsender", pid, views[1].ServerPID())
	}
	if _, err := admin(t).Exec(`SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	for i, s := range views {
		nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := s.Next(nctx)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("view %d after its walsender ended: %v", i, err)
		}
		_ = s.Close(ctx)
	}
	for i, e := range envs {
		var s store.Stream
		var err error
		testenv.WaitFor(t, 30*time.Second, "the stream open again", func() bool {
			s, err = e.d.OpenStream(ctx, opts)
			return err == nil
		})
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		views[i] = s
	}
	a2 := newEmitted("a.two", "k")
	a.emit(t, a.pool, a2, true, a.prefix())
	wantTx(t, next(t, views[0]), []bool{false}, a1)
	wantTx(t, next(t, views[0]), []bool{false}, a2)
	wantTx(t, next(t, views[1]), []bool{false}, b1)
}

// TestSharedSlotPendingCloseKeepsPosition: a view that opens behind the
// stream's position and closes before it attached (no transaction came
// meanwhile, so none admitted it) keeps its schema's persisted position:
// its schema's event read without it is delivered when it opens again.
// Persisting the stream's position for it would skip that event.
func TestSharedSlotPendingCloseKeepsPosition(t *testing.T) {
	envs := openSharedWAL(t, 2)
	a, b := envs[0], envs[1]
	ctx := context.Background()
	opts := &store.StreamOptions{StatusInterval: 50 * time.Millisecond}
	sa, err := a.d.OpenStream(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close(ctx)
	b1, a1 := newEmitted("b.one", "k"), newEmitted("a.one", "k")
	b.emit(t, b.pool, b1, true, b.prefix())
	a.emit(t, a.pool, a1, true, a.prefix())
	ta1 := next(t, sa) // the stream read past b1 without b
	wantTx(t, ta1, []bool{false}, a1)
	sb, err := b.d.OpenStream(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err = b.d.OpenStream(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	a.emit(t, a.pool, newEmitted("a.two", "k"), true, a.prefix()) // a boundary: b attaches
	wantTx(t, next(t, sb), []bool{false}, b1)
}
