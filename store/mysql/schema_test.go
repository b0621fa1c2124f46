package mysql

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// TestPlainSQLProducer inserts the way a non-Go service would, giving only
// the event type and payload, and checks every default: a UUIDv7 id that
// sorts between the library ids published before and after it, PENDING,
// due now, no key, empty headers.
func TestPlainSQLProducer(t *testing.T) {
	t.Parallel()
	d := setup(t)
	before := publish(t, d, &txbox.Event{Type: "plain", Payload: []byte("go-1")})[0]
	// UUIDv7 order is by millisecond: let the clock pass one.
	waitClock(2 * time.Millisecond)
	if _, err := d.DB().Exec("INSERT INTO "+d.qOutbox+" (event_type, payload) VALUES ('plain', ?)", []byte(`{"from":"sql"}`)); err != nil {
		t.Fatalf("plain SQL insert: %v", err)
	}
	waitClock(2 * time.Millisecond)
	after := publish(t, d, &txbox.Event{Type: "plain", Payload: []byte("go-2")})[0]

	rows := claimN(t, d, "plain", 10, 3)
	var sqlRow *store.OutboxRow
	for _, r := range rows {
		if string(r.Payload) == `{"from":"sql"}` {
			sqlRow = r
		}
	}
	if sqlRow == nil {
		t.Fatal("the plain-SQL row was not claimed")
	}
	id := sqlRow.ID
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		t.Fatalf("default id %s is version %d variant %v, want a UUIDv7", id, id.Version(), id.Variant())
	}
	ms := time.UnixMilli(int64(id.Time()/10_000) - 12219292800000) // uuid.Time is 100ns since 1582
	if d := time.Since(ms); d < -time.Second || d > 10*time.Second {
		t.Fatalf("default id's time %v is not now", ms)
	}
	if !(before.ID.String() < id.String() && id.String() < after.ID.String()) {
		t.Fatalf("default id %s does not sort between %s and %s", id, before.ID, after.ID)
	}
	if sqlRow.Key != "" || sqlRow.Headers != nil || sqlRow.Attempts != 0 {
		t.Fatalf("defaults: key %q headers %v attempts %d", sqlRow.Key, sqlRow.Headers, sqlRow.Attempts)
	}
	if !(rows[0].ID == before.ID && rows[1].ID == id && rows[2].ID == after.ID) {
		t.Fatalf("claim order %v %v %v, want go-1, sql, go-2", rows[0].ID, rows[1].ID, rows[2].ID)
	}
}

// waitClock busy-waits until the wall clock advanced by d: the test is
// about timestamps, not about letting something happen.
func waitClock(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// TestTimesAreUTCWhateverTheSession uses a pool whose sessions run in
// another time zone, with and without parseTime, and checks that times
// read back are true UTC and that not-before is honoured.
func TestTimesAreUTCWhateverTheSession(t *testing.T) {
	t.Parallel()
	for _, parseTime := range []bool{true, false} {
		name := "parseTime=false"
		if parseTime {
			name = "parseTime=true&loc=Local"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, dsn := newDatabase(t)
			dsn = strings.Replace(dsn, "parseTime=true", "", 1)
			if parseTime {
				dsn += "&parseTime=true&loc=Local"
			}
			dsn += "&time_zone=" + url.QueryEscape("'+05:00'")
			db, err := openSQL(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var tz string
			if err := db.QueryRow("SELECT @@session.time_zone").Scan(&tz); err != nil || tz != "+05:00" {
				t.Fatalf("session time zone %q, %v", tz, err)
			}
			d, err := New(db, Config{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			soon := &txbox.Event{ID: txbox.NewID(), Type: "tz", NotBefore: time.Now().Add(time.Hour)}
			past := &txbox.Event{ID: txbox.NewID(), Type: "tz", NotBefore: time.Now().Add(-time.Minute)}
			publish(t, d, soon, past)
			rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "tz", Limit: 10, LeaseDuration: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0].ID != past.ID {
				t.Fatalf("claimed %d rows; want only the event whose not-before passed", len(rows))
			}
			if skew := time.Since(rows[0].CreatedAt); skew < -5*time.Second || skew > 5*time.Second {
				t.Fatalf("created_at %v is %v away from now: not read as UTC", rows[0].CreatedAt, skew)
			}
		})
	}
}

func TestNotMigratedAndBadConfig(t *testing.T) {
	t.Parallel()
	_, dsn := newDatabase(t)
	d, err := Open(dsn, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = d.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: "x", Limit: 1, LeaseDuration: time.Second})
	if !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("claim before Migrate: %v, want ErrNotMigrated", err)
	}

	// Hostile names are refused before any connection is attempted: the
	// DSN points nowhere.
	for _, cfg := range []Config{{Schema: "x`; DROP DATABASE test;--"}, {TablePrefix: "a b"}, {Schema: strings.Repeat("s", 41)}} {
		if _, err := Open("root@tcp(192.0.2.1:1)/", cfg); !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("Open(%+v): %v, want ErrInvalidIdentifier", cfg, err)
		}
	}
	if _, err := New(nil, Config{}); !errors.Is(err, ErrInvalidParams) {
		t.Errorf("New(nil): %v", err)
	}
	// A malformed DSN is an error that does not echo the password.
	_, err = Open("app:s3cr3t-pw@tcp(127.0.0.1:3306/db", Config{})
	if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("malformed DSN: %v", err)
	}
}

func TestPacketTooLarge(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()
	var maxPacket int
	if err := d.DB().QueryRow("SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		t.Fatal(err)
	}
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ev := &txbox.Event{ID: txbox.NewID(), Type: "huge", Payload: make([]byte, maxPacket+1)}
	err = d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}})
	if !errors.Is(err, ErrPacketTooLarge) {
		t.Fatalf("payload over max_allowed_packet (%d): %v, want ErrPacketTooLarge", maxPacket, err)
	}
}

func TestSupportedVersion(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"10.11.19-MariaDB-0+deb12u1": true,
		"10.6.0-MariaDB":             true,
		"10.5.22-MariaDB":            false,
		"11.4.2-MariaDB":             true,
		"8.0.13":                     true,
		"8.0.12":                     false,
		"8.4.0":                      true,
		"9.1.0":                      true,
		"5.7.44-log":                 false,
		"garbage":                    false,
	} {
		if got := supportedVersion(v); got != want {
			t.Errorf("supportedVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestPlainSQLFiles: Migrations, what `txbox migrate get` writes for
// goose / golang-migrate / atlas users, is every embedded migration and
// its revert rendered for the Config's names, with no marker left, and
// RenderMigrations its up steps.
func TestPlainSQLFiles(t *testing.T) {
	t.Parallel()
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Migrations(Config{TablePrefix: "app_"})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := RenderMigrations(Config{TablePrefix: "app_"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != len(ms) || len(rendered) != len(ms) {
		t.Fatalf("%d migrations, %d rendered, %d embedded", len(plain), len(rendered), len(ms))
	}
	for i, m := range plain {
		if m.Version != ms[i].version || m.Name != ms[i].description || m.SQL != rendered[i] {
			t.Fatalf("migration %d is %d %s, want %s", i, m.Version, m.Name, ms[i].file)
		}
		if strings.Contains(m.SQL+m.Down, "{{") || strings.Contains(m.SQL+m.Down, "`txbox_") || strings.TrimSpace(m.Down) == "" {
			t.Fatalf("migration %s: a marker or the default prefix left, or no revert:\n%s\n%s", ms[i].file, m.SQL, m.Down)
		}
	}
}

func TestMigrateRecordsEachVersionOnce(t *testing.T) {
	t.Parallel()
	d := setup(t) // migrated once
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1].version
	v, err := d.SchemaVersion(ctx)
	if err != nil || v != last {
		t.Fatalf("schema version = %d, %v; want %d", v, err, last)
	}
	var rows int
	if err := d.DB().QueryRow("SELECT COUNT(*) FROM " + d.qSchemaVersion).Scan(&rows); err != nil || rows != len(ms) {
		t.Fatalf("schema_version holds %d rows (%v), want %d", rows, err, len(ms))
	}
	// A half-applied migration (MySQL DDL commits on its own) is applied
	// again without error: drop the version rows and one table, migrate.
	// Version 2's CHECK exists already and is not added twice.
	if _, err := d.DB().Exec("DELETE FROM " + d.qSchemaVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DB().Exec("DROP TABLE " + d.qLease); err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("re-running an interrupted migration: %v", err)
	}
	if ok, err := d.LeaseAcquire(ctx, &store.LeaseParams{Name: "n", Holder: "h", TTL: time.Second}); err != nil || !ok {
		t.Fatalf("the re-created lease table does not work: %v %v", ok, err)
	}
}

// TestPlainSQLHeadersNeverWedgeTheClaim: headers written by hand may hold
// numbers, booleans, objects or null; they are delivered as their JSON
// text. Headers that are not an object at all are refused by the table
// (schema version 2).
func TestPlainSQLHeadersNeverWedgeTheClaim(t *testing.T) {
	t.Parallel()
	d := setup(t)
	if _, err := d.DB().Exec("INSERT INTO "+d.qOutbox+" (event_type, payload, headers) VALUES ('hdr', 'p', ?)", `{"n": 3, "b": true, "s": "x", "o": {"k": 1}, "z": null}`); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{`[1, 2]`, `"text"`, `3`, `null`} {
		if _, err := d.DB().Exec("INSERT INTO "+d.qOutbox+" (event_type, payload, headers) VALUES ('hdr', 'p', ?)", h); err == nil {
			t.Errorf("headers %s accepted: the CHECK of schema version 2 is missing", h)
		}
	}
	rows, err := d.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: "hdr", Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	got := rows[0].Headers
	if rows[0].Invalid != "" {
		t.Fatalf("row marked invalid: %s", rows[0].Invalid)
	}
	want := map[string]string{"n": "3", "b": "true", "s": "x", "o": `{"k": 1}`, "z": ""}
	if len(got) != len(want) {
		t.Fatalf("headers = %v, want %v", got, want)
	}
	for k, v := range want {
		// MySQL 8 normalises JSON text; compare without spaces.
		if strings.ReplaceAll(got[k], " ", "") != strings.ReplaceAll(v, " ", "") {
			t.Errorf("header %s = %q, want %q", k, got[k], v)
		}
	}
}

// TestUpgradeToVersion2DeadLettersBadHeaders: upgrading a database whose
// outbox holds rows with headers that are not a JSON object succeeds. A
// delivered (PROCESSED) one gets {} (what was delivered: no headers); an
// unfinished one is dead-lettered with the reason, as the relay would; the
// others are untouched; a second run changes nothing.
func TestUpgradeToVersion2DeadLettersBadHeaders(t *testing.T) {
	t.Parallel()
	_, dsn := newDatabase(t)
	d, err := Open(dsn, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range statements(d.render(ms[0].sql)) {
		if _, err := d.DB().Exec(stmt); err != nil {
			t.Fatalf("version 1: %v", err)
		}
	}
	done, pending, good := txbox.NewID(), txbox.NewID(), txbox.NewID()
	for _, r := range []struct {
		id              txbox.ID
		status, headers string
	}{
		{done, store.StatusProcessed, `[1, 2]`},
		{pending, store.StatusPending, `"text"`},
		{good, store.StatusPending, `{"a": "b"}`},
	} {
		if _, err := d.DB().Exec("INSERT INTO "+d.qOutbox+" (id, event_type, payload, headers, status) VALUES (?, 'up', 'p', ?, ?)", r.id.String(), r.headers, r.status); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := d.Migrate(ctx); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
	}
	ms, err = migrations()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != ms[len(ms)-1].version {
		t.Fatalf("schema version = %d, %v; want %d", v, err, ms[len(ms)-1].version)
	}
	var headers string
	if err := d.DB().QueryRow("SELECT headers FROM "+d.qOutbox+" WHERE id = ?", done.String()).Scan(&headers); err != nil || headers != "{}" {
		t.Errorf("processed row's headers = %q, %v; want {}", headers, err)
	}
	if s, _ := statusOf(t, d, pending); s != "" {
		t.Errorf("pending row with headers \"text\" still in the outbox (%s)", s)
	}
	dl, err := d.DeadLetterGet(ctx, pending)
	if err != nil {
		t.Fatalf("the pending row was not dead-lettered: %v", err)
	}
	if !strings.Contains(dl.LastError, "not a JSON object") || !strings.Contains(dl.LastError, `"text"`) || dl.Attempts != 1 || dl.Status != store.DeadLetterUnresolved {
		t.Errorf("dead letter = %+v", dl)
	}
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "up", Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(rows) != 1 || rows[0].ID != good || rows[0].Headers["a"] != "b" {
		t.Fatalf("claim after the upgrade: %+v, %v; want the good row only", rows, err)
	}
	// The dead letter cannot go back: the CHECK would refuse it. Retrying
	// it leaves it where it is, without failing.
	if n, err := d.DeadLetterRetry(ctx, []txbox.ID{pending}); err != nil || n != 0 {
		t.Fatalf("retry of the bad dead letter = %d, %v; want 0 and no error", n, err)
	}
}

// TestMalformedPlainSQLRowsAreRefused: the table refuses what the relay
// could not parse, so no hand-written row can wedge an event type.
func TestMalformedPlainSQLRowsAreRefused(t *testing.T) {
	t.Parallel()
	d := setup(t)
	for _, c := range []struct{ id, typ string }{
		{"not-a-uuid", "ok"},
		{strings.ToUpper(txbox.NewID().String()), "ok"},
		{txbox.NewID().String(), "has space"},
		{txbox.NewID().String(), ""},
		{txbox.NewID().String(), "x'); DROP TABLE t;--"},
	} {
		if _, err := d.DB().Exec("INSERT INTO "+d.qOutbox+" (id, event_type, payload) VALUES (?, ?, 'p')", c.id, c.typ); err == nil {
			t.Errorf("row with id %q and type %q was accepted", c.id, c.typ)
		}
	}
	if _, err := d.DB().Exec("INSERT INTO "+d.qOutbox+" (id, event_type, payload) VALUES (?, 'a.B:c-d_9', 'p')", txbox.NewID().String()); err != nil {
		t.Fatalf("a well-formed row was refused: %v", err)
	}
}

func TestMigrateWithoutDatabaseIsAClearError(t *testing.T) {
	t.Parallel()
	d, err := Open(testenvDSNWithoutDatabase(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(context.Background()); !errors.Is(err, ErrInvalidParams) || !strings.Contains(err.Error(), "no database") {
		t.Fatalf("Migrate with no database: %v", err)
	}
}

// TestDeadLetterRetrySkipsIDsBackInTheOutbox: a dead letter whose id a
// producer already published again stays dead-lettered; the others of the
// batch are retried.
func TestDeadLetterRetrySkipsIDsBackInTheOutbox(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()
	evs := publish(t, d, events("dl", 2)...)
	rows := claimN(t, d, "dl", 2, 2)
	var items []store.OutboxFinishItem
	for _, r := range rows {
		items = append(items, store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeFailed, Error: "x"})
	}
	if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 2 {
		t.Fatalf("move: %d %v", n, err)
	}
	// A producer publishes evs[0]'s id again.
	publish(t, d, &txbox.Event{ID: evs[0].ID, Type: "dl", Payload: []byte("again")})
	n, err := d.DeadLetterRetry(ctx, []txbox.ID{evs[0].ID, evs[1].ID})
	if err != nil || n != 1 {
		t.Fatalf("retry = %d, %v; want 1 retried and no error", n, err)
	}
	if _, err := d.DeadLetterGet(ctx, evs[0].ID); err != nil {
		t.Fatalf("the conflicting dead letter is gone: %v", err)
	}
	if _, err := d.DeadLetterGet(ctx, evs[1].ID); !errors.Is(err, txbox.ErrNotFound) {
		t.Fatalf("the retried dead letter is still there: %v", err)
	}
	if s, _ := statusOf(t, d, evs[1].ID); s != store.StatusPending {
		t.Fatalf("retried row status %q", s)
	}
}
