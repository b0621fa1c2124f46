package sqlstore

import (
	"database/sql"
	"fmt"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// CheckInboxRecord checks the params of a dialect's InboxRecord before
// anything is sent: nil params wrap invalid (the dialect's
// ErrInvalidParams), a bad consumer name is store.ValidateConsumerName's
// error under the dialect's name.
func CheckInboxRecord(dialect string, invalid error, params *store.InboxRecordParams) error {
	if params == nil {
		return fmt.Errorf("%w: nil InboxRecordParams", invalid)
	}
	if err := store.ValidateConsumerName(params.Consumer); err != nil {
		return fmt.Errorf("%s: inbox record: %w", dialect, err)
	}
	return nil
}

// SQLTx returns tx as the *sql.Tx of a dialect's SQLTx, once the dialect
// unwrapped its inbox transaction: txbox.ErrNoTransaction for nil (a
// non-transactional inbox), an *txbox.UnsupportedTxError naming dialect
// for anything else.
func SQLTx(dialect string, tx any) (*sql.Tx, error) {
	switch v := tx.(type) {
	case nil:
		return nil, txbox.ErrNoTransaction
	case *sql.Tx:
		return v, nil
	default:
		return nil, &txbox.UnsupportedTxError{Dialect: dialect, Type: fmt.Sprintf("%T", tx)}
	}
}
