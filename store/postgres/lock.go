package postgres

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

var _ store.OutboxLocker = (*Driver)(nil)

// OutboxLock is the lock claim (store.OutboxLocker): on a connection of
// its own it begins a READ COMMITTED transaction, bounds it on the session
// and runs the claim's SELECT ... FOR UPDATE SKIP LOCKED without the
// UPDATE, all in one round trip (a pipelined batch). The rows keep their
// tuples: the row lock sets the tuple's xmax, a small WAL record and no
// new row version or index entry, where the lease claim writes a whole
// new version of every row, with its index entries, and the finish
// another.
//
// The bound: idle_in_transaction_session_timeout and statement_timeout
// are both set (SET LOCAL, so they end with the transaction) to the lease
// duration, which the relay's send stays within. A relay that stops
// answering, SIGSTOPped say, has its session ended by the server after
// that long, which aborts the transaction and frees the rows.
func (d *Driver) OutboxLock(ctx context.Context, params *store.OutboxClaimParams) (store.LockedBatch, error) {
	c, err := d.prepareClaim(params)
	if err != nil {
		return nil, err
	}
	c.args = append(c.args[:2:2], c.args[4:]...) // no lease duration, no token
	c.token = txbox.ID{}
	c.query = d.q.lockClaim
	if c.ord != nil {
		c.query = d.claimOrdered(max(params.KeyRun, 1), true, c.horizon)
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, d.translate("lock claim", err)
	}
	bound := strconv.FormatInt(max(params.LeaseDuration.Milliseconds(), 1), 10)
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('statement_timeout', $1, true)`, bound)
	b.Queue(c.query, c.args...)
	br := conn.SendBatch(ctx, b)
	rows, err := d.lockRead(br, c)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = d.translate("lock claim", cerr)
	}
	lb := &lockedBatch{d: d, conn: conn, rows: rows, cur: c.cur}
	if err != nil {
		lb.end(ctx, false)
		return nil, err
	}
	if len(rows) == 0 {
		lb.end(ctx, false)
		return nil, nil
	}
	return lb, nil
}

// lockRead reads the results of the lock claim's batch.
func (d *Driver) lockRead(br pgx.BatchResults, c *claimCall) ([]*store.OutboxRow, error) {
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, d.translate("lock claim", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, d.translate("lock claim", err)
	}
	return c.scan(rows)
}

// lockedBatch is a lock-claimed batch: the connection whose transaction
// holds the rows' locks.
type lockedBatch struct {
	d    *Driver
	conn *pgxpool.Conn
	rows []*store.OutboxRow
	// cur is the type's claim cursor (nil when ordered): a rollback puts
	// rows back below it.
	cur *claimCursor
}

// Rows returns the locked rows in claim order.
func (b *lockedBatch) Rows() []*store.OutboxRow { return b.rows }

// Finish applies the outcomes with the lease finish's statement, fenced by
// the transaction's locks instead of a token, moves the failed rows to the
// dead-letter table, and commits.
func (b *lockedBatch) Finish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	if b.conn == nil {
		return nil, errBadParams("lock finish", "the batch has already ended")
	}
	ours, fenced, failed := store.FenceLockedItems(b.rows, params)
	f, err := prepareFinish(&store.OutboxFinishParams{Items: ours, DeleteAcked: params.DeleteAcked})
	if err != nil {
		b.end(ctx, false)
		return nil, err
	}
	var finished int64
	if f.args != nil {
		if err := b.conn.QueryRow(ctx, b.d.q.lockFinish, f.args...).Scan(&finished); err != nil {
			b.end(ctx, false)
			return nil, b.d.translate("lock finish", err)
		}
	}
	if len(failed) > 0 {
		if _, err := b.conn.Exec(ctx, b.d.q.lockDLMove, pgUUIDs(failed)); err != nil {
			b.end(ctx, false)
			return nil, b.d.translate("lock finish (dead-letter)", err)
		}
	}
	if err := b.end(ctx, true); err != nil {
		return nil, err
	}
	res := f.result(finished)
	res.Fenced += fenced
	return res, nil
}

// Rollback aborts the transaction.
func (b *lockedBatch) Rollback(ctx context.Context) error {
	if b.conn == nil {
		return nil
	}
	return b.end(ctx, false)
}

// end commits or rolls back and releases the connection. A connection
// whose COMMIT or ROLLBACK did not go through is closed rather than handed
// back to the pool in an unknown state; the server then aborts what was
// left of the transaction.
func (b *lockedBatch) end(ctx context.Context, commit bool) error {
	conn := b.conn
	if conn == nil {
		return nil
	}
	b.conn = nil
	stmt := "ROLLBACK"
	if commit {
		stmt = "COMMIT"
	}
	// A rollback must go through even when ctx has ended: it is what
	// frees the rows at once.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	tag, err := conn.Exec(ectx, stmt)
	if err == nil && commit && tag.String() != "COMMIT" {
		// PostgreSQL answers COMMIT of a failed transaction with
		// ROLLBACK and no error.
		err = errRolledBack
	}
	if err != nil {
		_ = conn.Conn().Close(ectx)
	}
	conn.Release()
	if !commit && b.cur != nil && len(b.rows) > 0 {
		b.cur.rolledBack()
	}
	if err != nil {
		return b.d.translate("lock "+stmt, err)
	}
	return nil
}

// errRolledBack is the error of a lock finish whose COMMIT the server
// turned into a rollback: the transaction had already failed, for example
// because the session's bound ended it.
var errRolledBack = errors.New("postgres: lock finish: the transaction was rolled back")
