package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// TestWALSlotInvalidated provokes on the real server what TestWALEmitGuard
// can only substitute: a slot PostgreSQL stops reserving WAL for
// (wal_status unreserved), then invalidates (lost). Emits must fail from
// the moment the slot is no longer reserved, and opening the stream must
// say the slot is lost and how to recreate it.
//
// It lowers two settings of the whole cluster (max_wal_size to its
// minimum, max_slot_wal_keep_size to 1MB) for a few seconds, which would
// invalidate any other lagging slot too, so it runs only with TXBOX_CHAOS
// (make chaos runs one package at a time) and is not parallel: no other
// test of the package runs while it does.
func TestWALSlotInvalidated(t *testing.T) {
	if !testenv.Chaos(t, "changes settings of the whole PostgreSQL cluster") {
		return
	}
	ctx := ctxT(t)
	w := newWAL(t)
	w.createSlot(t)
	if err := w.emit(ctx, walEvent("a")); err != nil {
		t.Fatalf("emit while the slot is reserved: %v", err)
	}
	setServer(t, w.db, map[string]string{"max_wal_size": "32MB", "max_slot_wal_keep_size": "1MB"})

	status := func() string {
		var s sql.NullString
		if err := w.db.QueryRow(`SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s.String
	}
	// Each switch moves the WAL on by a segment (16MB) without writing
	// it: three put the slot past max_wal_size and the 1MB it may keep.
	testenv.WaitFor(t, 30*time.Second, "the slot no longer reserved", func() bool {
		if _, err := w.db.Exec(`SELECT pg_logical_emit_message(false, 'txbox-test-filler', 'x'), pg_switch_wal()`); err != nil {
			t.Fatal(err)
		}
		s := status()
		return s != "reserved" && s != "extended"
	})
	first := status()
	// unreserved until the next checkpoint removes the WAL, lost after
	// (a checkpoint the switches triggered may have come first).
	wantSlotError(t, w.emit(ctx, walEvent("a")), postgres.ErrSlotNotReady, "has wal_status "+first+", not reserved or extended")

	testenv.WaitFor(t, 30*time.Second, "the slot invalidated", func() bool {
		if _, err := w.db.Exec(`CHECKPOINT`); err != nil {
			t.Fatal(err)
		}
		return status() == "lost"
	})
	wantSlotError(t, w.emit(ctx, walEvent("a")), postgres.ErrSlotNotReady, "has wal_status lost")
	_, err := w.d.OpenStream(ctx, nil)
	if !errors.Is(err, store.ErrStreamLost) || !strings.Contains(err.Error(), "invalidated the slot") || !strings.Contains(err.Error(), "CreateStream") {
		t.Errorf("open an invalidated slot: %v, want store.ErrStreamLost saying so and how to recreate it", err)
	}
	t.Logf("slot went %s, then lost", first)
}

// setServer sets server settings with ALTER SYSTEM and reloads them; when
// the test ends, each gets back what postgresql.auto.conf held before.
func setServer(t *testing.T, db *sql.DB, settings map[string]string) {
	t.Helper()
	for name, value := range settings {
		var before sql.NullString
		err := db.QueryRow(`SELECT setting FROM pg_file_settings WHERE name = $1 AND sourcefile LIKE '%postgresql.auto.conf' ORDER BY seqno DESC LIMIT 1`, name).Scan(&before)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			q := `ALTER SYSTEM RESET ` + name
			if before.Valid {
				q = `ALTER SYSTEM SET ` + name + ` = '` + strings.ReplaceAll(before.String, "'", "''") + `'`
			}
			if _, err := db.Exec(q); err != nil {
				t.Errorf("restore %s: %v", name, err)
			}
			if _, err := db.Exec(`SELECT pg_reload_conf()`); err != nil {
				t.Errorf("reload: %v", err)
			}
		})
		if _, err := db.Exec(`ALTER SYSTEM SET ` + name + ` = '` + value + `'`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
}

// TestWALRefusesSyncStandbyName sets synchronous_standby_names on the real
// server to a list that names the relay's application_name, which would
// make every commit of the cluster wait for the relay: opening the stream
// must refuse, before it connects. While the setting holds, every commit
// of the cluster waits (the test itself commits nothing meanwhile), so it
// runs only with TXBOX_CHAOS and is not parallel, as TestWALSlotInvalidated.
func TestWALRefusesSyncStandbyName(t *testing.T) {
	if !testenv.Chaos(t, "changes settings of the whole PostgreSQL cluster") {
		return
	}
	ctx := ctxT(t)
	w := newWAL(t)
	w.createSlot(t)
	value := `ANY 1 (standby_a, "` + postgres.DefaultApplicationName + `")`
	setServer(t, w.db, map[string]string{"synchronous_standby_names": value})
	testenv.WaitFor(t, 10*time.Second, "the setting reloaded", func() bool {
		var got string
		return w.db.QueryRow(`SHOW synchronous_standby_names`).Scan(&got) == nil && got == value
	})
	s, err := w.d.OpenStream(ctx, nil)
	if err == nil {
		_ = s.Close(context.Background())
		t.Fatal("the stream opened while synchronous_standby_names names its application_name")
	}
	if !strings.Contains(err.Error(), "would choose the relay's replication connection") {
		t.Errorf("open: %v, want the refusal that names synchronous_standby_names", err)
	}
}
