package postgres_test

import (
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// TestWALRedriveGoesToThePoller: in WAL mode a redriven row is the table
// poller's (stream_pos 0), even one whose transaction came after the
// slot's snapshot (which, left with stream_pos NULL, the poller would
// leave to the stream forever), and a spilled one.
func TestWALRedriveGoesToThePoller(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "redrive.wal"
	e.takeSnapshot(t)
	late, spilled := txbox.NewID(), txbox.NewID()
	e.exec(t, `INSERT INTO `+e.table("outbox")+` (id, event_type, payload, status, processed_at) VALUES ($1, $2, '\x01', 'PROCESSED', now())`, late, typ)
	e.exec(t, `INSERT INTO `+e.table("outbox")+` (id, event_type, payload, status, processed_at, stream_pos) VALUES ($1, $2, '\x01', 'PROCESSED', now(), 7)`, spilled, typ)
	res, err := e.d.OutboxRedrive(ctx, &store.OutboxRedriveParams{EventType: typ, Limit: 10})
	if err != nil || res.Changed != 2 {
		t.Fatalf("redrive: %+v, %v", res, err)
	}
	rows, err := e.d.OutboxClaim(ctx, claimParams(typ, false))
	if err != nil || !sameIDs(ids(rows), []txbox.ID{late, spilled}) {
		t.Fatalf("claim after the redrive: %v, %v; want %v and %v", ids(rows), err, late, spilled)
	}
	var zero int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("outbox")+` WHERE stream_pos = 0`).Scan(&zero); err != nil || zero != 2 {
		t.Fatalf("rows with stream_pos 0: %d, %v; want 2", zero, err)
	}
}
