package sqlite

// The inbox queries (store.Inbox). Written by the inbox engineer; the inbox
// table itself is created by this package's migration.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

var _ store.Inbox = (*Driver)(nil)

// inboxTx is the store.InboxTx of the SQLite driver. It holds SQLite's
// write lock (BEGIN IMMEDIATE) and the driver's in-process write slot from
// InboxBegin to Commit or Rollback, so in-process writers queue in Go
// rather than in SQLite's sleeping busy handler.
type inboxTx struct {
	d    *Driver
	tx   *sql.Tx
	once sync.Once
}

func (t *inboxTx) Native() any { return t.tx }

func (t *inboxTx) Commit(context.Context) error {
	err := t.tx.Commit()
	t.release()
	return t.d.translate(err)
}

func (t *inboxTx) Rollback(context.Context) error {
	err := t.tx.Rollback()
	t.release()
	if err == nil || errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return t.d.translate(err)
}

func (t *inboxTx) release() { t.once.Do(t.d.unlockWriter) }

// InboxBegin starts a write transaction (BEGIN IMMEDIATE semantics) whose
// Native value is a *sql.Tx. SQLite has a single writer, so concurrent
// deliveries of one process run one after the other; deliveries from other
// processes wait in the busy handler (Config.BusyTimeout). The handler must
// not call methods of this Driver that write outside the transaction (for
// example LeaseAcquire): they wait for the write slot the transaction
// holds.
func (d *Driver) InboxBegin(ctx context.Context) (store.InboxTx, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if err := d.lockWriter(ctx); err != nil {
		return nil, err
	}
	tx, err := d.begin(ctx)
	if err != nil {
		d.unlockWriter()
		return nil, d.translate(err)
	}
	return &inboxTx{d: d, tx: tx}, nil
}

// inboxQueryer is the method set InboxRecord needs from a caller's
// transaction besides Commit: RETURNING tells which ids were new.
type inboxQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	Commit() error
}

// InboxRecord records params.IDs for params.Consumer with one
// INSERT OR IGNORE … RETURNING over a JSON array of ids, and returns the new
// ids in input order. See store.Inbox.
func (d *Driver) InboxRecord(ctx context.Context, tx any, params *store.InboxRecordParams) ([]txbox.ID, error) {
	if it, ok := tx.(store.InboxTx); ok {
		tx = it.Native()
	}
	q, err := inboxQueryerOf(tx)
	if err != nil {
		return nil, err
	}
	if err := sqlstore.CheckInboxRecord("sqlite", ErrInvalidParams, params); err != nil {
		return nil, err
	}
	if len(params.IDs) == 0 {
		return nil, nil
	}
	strs := make([]string, len(params.IDs))
	for i, id := range params.IDs {
		strs[i] = id.String()
	}
	arr, err := json.Marshal(strs)
	if err != nil {
		return nil, fmt.Errorf("sqlite: inbox record: %w", err)
	}
	rows, err := q.QueryContext(ctx, d.q.inboxRecord, params.Consumer, string(arr))
	if err != nil {
		return nil, d.translate(err)
	}
	defer rows.Close()
	fresh := make(map[txbox.ID]bool, len(params.IDs))
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, d.translate(err)
		}
		id, err := txbox.ParseID(s)
		if err != nil {
			return nil, fmt.Errorf("sqlite: inbox record: %w", err)
		}
		fresh[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, d.translate(err)
	}
	return store.InputOrder(params.IDs, fresh), nil
}

func inboxQueryerOf(tx any) (inboxQueryer, error) {
	if tx == nil {
		return nil, txbox.ErrNoTransaction
	}
	if v := reflect.ValueOf(tx); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, txbox.ErrNoTransaction
	}
	switch t := tx.(type) {
	case *sql.Tx:
		return t, nil
	case *sql.DB, *sql.Conn:
		return nil, fmt.Errorf("%w: got %T; the inbox records ids inside a transaction", txbox.ErrNoTransaction, tx)
	case inboxQueryer:
		return t, nil
	default:
		return nil, &txbox.UnsupportedTxError{Dialect: DialectName, Type: fmt.Sprintf("%T", tx)}
	}
}

// InboxCleanup deletes up to Limit ids recorded more than OlderThan ago, on
// the database clock, oldest first, through the processed_at index.
func (d *Driver) InboxCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "inbox cleanup", d.q.inboxCleanup, params)
}

// SQLTx returns the *sql.Tx inside the tx an inbox handler receives from a
// SQLite store. It returns txbox.ErrNoTransaction for nil (a
// non-transactional inbox) and an *txbox.UnsupportedTxError for anything
// else. inbox.Typed does the same generically.
func SQLTx(tx any) (*sql.Tx, error) {
	if it, ok := tx.(store.InboxTx); ok {
		tx = it.Native()
	}
	return sqlstore.SQLTx(DialectName, tx)
}
