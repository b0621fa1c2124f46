package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/txbox/txbox"
)

// Inbox is the part of the seam that the idempotent consumer (package
// inbox) uses. A dialect that has the inbox table implements it next to its
// Driver; it is kept out of Driver so a producer-only store need not.
type Inbox interface {
	// InboxBegin starts a transaction on the store's database for one
	// delivery (or one batch). The consumer records ids and the user's
	// handler writes its effect through the same transaction, so both
	// commit or roll back together. The transaction runs at the database's
	// default READ COMMITTED level (BEGIN IMMEDIATE on SQLite), which is
	// what makes a concurrent duplicate wait for the first writer instead
	// of failing with a serialization error.
	InboxBegin(ctx context.Context) (InboxTx, error)

	// InboxRecord inserts (Consumer, id) for every id inside tx, ignoring
	// ids this consumer already recorded, and returns the ids it newly
	// recorded, in input order. It is one atomic insert-or-ignore per call
	// (ON CONFLICT DO NOTHING / INSERT IGNORE / INSERT OR IGNORE), never a
	// read followed by a write: when another transaction recorded the same
	// id and has not committed yet, the insert waits for it and then
	// reports the id as not new. tx is an InboxTx from InboxBegin or the
	// dialect's native transaction (pgx.Tx, *sql.Tx); anything else is
	// txbox.ErrNoTransaction or a *txbox.UnsupportedTxError. Duplicate ids
	// in IDs are recorded once. Consumer must pass ValidateConsumerName.
	InboxRecord(ctx context.Context, tx any, params *InboxRecordParams) ([]txbox.ID, error)

	// InboxCleanup deletes up to Limit recorded ids, of every consumer,
	// recorded more than OlderThan ago on the database clock, and returns
	// how many it deleted.
	InboxCleanup(ctx context.Context, params *CleanupParams) (int, error)
}

// ErrTxConflict is matched (errors.Is) by errors of InboxRecord when the
// database rolled the whole transaction back to break a deadlock or a
// serialization conflict (MySQL 1213, PostgreSQL 40P01 / 40001). Nothing of
// the transaction survives, and InboxRecord runs before any handler, so
// the caller may begin a new transaction and try again.
var ErrTxConflict = errors.New("store: transaction rolled back by a lock conflict; retry it")

// InboxTx is a transaction opened by Inbox.InboxBegin.
type InboxTx interface {
	// Native returns the dialect's transaction for the user's handler to
	// write through: pgx.Tx for the PostgreSQL store, *sql.Tx for MySQL
	// and SQLite.
	Native() any
	// Commit commits the transaction.
	Commit(ctx context.Context) error
	// Rollback rolls the transaction back. It is safe to call after
	// Commit, where it does nothing.
	Rollback(ctx context.Context) error
}

// InboxRecordParams are the parameters of Inbox.InboxRecord.
type InboxRecordParams struct {
	// Consumer names the consuming component; ids are unique per consumer,
	// so two consumers in one service each handle the same event once.
	Consumer string
	// IDs are the event ids to record.
	IDs []txbox.ID
}

// MaxConsumerNameLength is the longest consumer name accepted. It fits the
// MySQL VARCHAR(200) column with room to spare.
const MaxConsumerNameLength = 100

// ValidateConsumerName accepts 1 to 100 characters from [A-Za-z0-9._:-].
// Consumer names are bound as query parameters, never spliced into SQL, but
// a strict alphabet keeps them safe as cache keys, metric labels and log
// fields too. The error matches txbox.ErrInvalidIdentifier.
func ValidateConsumerName(name string) error {
	if len(name) == 0 || len(name) > MaxConsumerNameLength {
		return fmt.Errorf("%w: consumer name %q must be 1..%d characters", txbox.ErrInvalidIdentifier, truncate(name), MaxConsumerNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return fmt.Errorf("%w: consumer name %q: character %q at %d is not in [A-Za-z0-9._:-]", txbox.ErrInvalidIdentifier, truncate(name), c, i)
		}
	}
	return nil
}

// SortedIDs returns ids sorted by their bytes, which is the order of their
// canonical text and of a UUID primary key, without duplicates. A dialect
// records (or locks) a batch in this order so that overlapping batches
// take their locks in one order.
func SortedIDs(ids []txbox.ID) []txbox.ID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(out)
}

// InputOrder returns the ids of in that fresh marks, once each, in the
// order of in: what InboxRecord returns when fresh holds the ids it newly
// recorded. It removes them from fresh.
func InputOrder(in []txbox.ID, fresh map[txbox.ID]bool) []txbox.ID {
	out := make([]txbox.ID, 0, len(fresh))
	for _, id := range in {
		if fresh[id] {
			out = append(out, id)
			delete(fresh, id)
		}
	}
	return out
}
