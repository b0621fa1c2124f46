package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

var _ store.OutboxLocker = (*Driver)(nil)

// OutboxLock is the lock claim (store.OutboxLocker): on a connection of
// its own, a READ COMMITTED transaction runs the claim's SELECT ... FOR
// UPDATE SKIP LOCKED (the same reads as OutboxClaim, ordered claims
// included) and stops there. InnoDB keeps row locks in memory, so the
// claim writes nothing at all; the finish is the one write of each row.
//
// The bound: the session's wait_timeout is set to the lease duration
// (whole seconds, rounded up), so a relay that stops answering, SIGSTOPped
// say, has its connection closed by the server after that long, which
// rolls the transaction back and frees the rows; innodb_lock_wait_timeout
// is set to the same bound for the finish's writes. Both go back to the
// server's defaults before the connection returns to the pool.
func (d *Driver) OutboxLock(ctx context.Context, params *store.OutboxClaimParams) (store.LockedBatch, error) {
	if err := checkClaim(params); err != nil {
		return nil, err
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, wrap("lock claim", err)
	}
	secs := max(int64((params.LeaseDuration+time.Second-1)/time.Second), 1)
	b := &lockedBatch{d: d, conn: conn}
	if _, err := conn.ExecContext(ctx, "SET SESSION wait_timeout = ?, innodb_lock_wait_timeout = ?", secs, secs); err != nil {
		b.release(false)
		return nil, wrap("lock claim", err)
	}
	b.bounded = true
	iso := sql.LevelReadCommitted
	if d.isolation != sql.LevelDefault {
		iso = d.isolation
	}
	// database/sql rolls a transaction back when its BeginTx context
	// ends, and ctx is the claim's: the transaction must outlive it until
	// Finish or Rollback. Each statement still runs under ctx.
	if b.tx, err = conn.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: iso}); err != nil {
		b.release(false)
		return nil, wrap("lock claim", err)
	}
	if b.rows, err = d.claimIn(ctx, b.tx, params, txbox.ID{}, true); err != nil {
		_ = b.Rollback(ctx)
		return nil, wrap("lock claim", err)
	}
	if len(b.rows) == 0 {
		return nil, b.Rollback(ctx)
	}
	return b, nil
}

// lockedBatch is a lock-claimed batch: the connection and transaction
// holding the rows' locks.
type lockedBatch struct {
	d    *Driver
	conn *sql.Conn
	tx   *sql.Tx
	rows []*store.OutboxRow
	// bounded is true once the session variables were set.
	bounded bool
}

// Rows returns the locked rows in claim order.
func (b *lockedBatch) Rows() []*store.OutboxRow { return b.rows }

// Finish runs the lease finish's statements in the transaction, fenced by
// its locks instead of a token, moves the failed rows to the dead-letter
// table (moveIn) and commits.
func (b *lockedBatch) Finish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	if b.tx == nil {
		return nil, errors.New("mysql: lock finish: the batch has already ended")
	}
	ours, fenced, failed := store.FenceLockedItems(b.rows, params)
	deleteAcked := params != nil && params.DeleteAcked
	stmts, err := b.d.finishPlan(&store.OutboxFinishParams{Items: ours, DeleteAcked: deleteAcked}, true)
	if err != nil {
		_ = b.Rollback(ctx)
		return nil, err
	}
	var finished int64
	for _, st := range stmts {
		n, err := sqlstore.Affected(b.tx.ExecContext(ctx, st.query, st.args...))
		finished += n
		if err != nil {
			_ = b.Rollback(ctx)
			return nil, wrap("lock finish", err)
		}
	}
	if len(failed) > 0 {
		if _, err := b.d.moveIn(ctx, b.tx, store.SortedIDs(failed)); err != nil {
			_ = b.Rollback(ctx)
			return nil, wrap("lock finish (dead-letter)", err)
		}
	}
	err = b.tx.Commit()
	b.tx = nil
	b.release(err == nil)
	if err != nil {
		return nil, wrap("lock finish", fmt.Errorf("commit: %w", err))
	}
	return &store.OutboxFinishResult{Finished: int(finished), Fenced: fenced + len(ours) - int(finished)}, nil
}

// Rollback aborts the transaction.
func (b *lockedBatch) Rollback(context.Context) error {
	if b.conn == nil {
		return nil
	}
	var err error
	if b.tx != nil {
		err = b.tx.Rollback()
		b.tx = nil
	}
	b.release(err == nil)
	if err != nil {
		return wrap("lock rollback", err)
	}
	return nil
}

// release puts the session variables back and returns the connection to
// the pool. A connection in an unknown state (ok false, or the reset
// failed) is discarded: the server then rolls back what was left of its
// transaction.
func (b *lockedBatch) release(ok bool) {
	conn := b.conn
	if conn == nil {
		return
	}
	b.conn = nil
	if ok && b.bounded {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := conn.ExecContext(ctx, "SET SESSION wait_timeout = DEFAULT, innodb_lock_wait_timeout = DEFAULT")
		cancel()
		ok = err == nil
	}
	if !ok {
		// Returning driver.ErrBadConn from Raw makes database/sql
		// discard the connection.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
}
