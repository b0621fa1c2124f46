package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// groupQueries are the statements of the failure groups.
func (d *Driver) groupQueries(q *queries) {
	groups, sample := sqlstore.GroupStatements(d.qDeadLetter)
	q.groups = sqlstore.GroupSQL{
		// Through txbox_group, whose first column is the fingerprint:
		// the unprinted rows are its NULL range, locked in its order. A
		// row another caller holds is waited for, and skipped once it has
		// a fingerprint, so fewer than the limit means none was left.
		Unprinted: d.render("SELECT id, event_type, route, attempts, COALESCE(last_error, '') FROM {{dead_letter}} FORCE INDEX (txbox_group)" +
			" WHERE fingerprint IS NULL ORDER BY fingerprint, status, failed_at, id LIMIT ? FOR UPDATE"),
		Print: d.render("UPDATE {{dead_letter}} SET fingerprint = ?, failure_class = ?, failure_message = ?, destination = ?" +
			" WHERE id = ? AND fingerprint IS NULL"),
		Groups:   groups,
		Sample:   sample,
		ScanID:   func(id *txbox.ID) any { return idScan{id} },
		ScanTime: func(t *time.Time) any { return nullTime{t} },
	}
}

// DeadLetterFingerprint fingerprints up to Limit dead letters that have
// none, in one transaction; a concurrent caller's rows are waited for.
func (d *Driver) DeadLetterFingerprint(ctx context.Context, params *store.DeadLetterFingerprintParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, fmt.Errorf("%w: dead-letter fingerprint needs Limit >= 1", ErrInvalidParams)
	}
	var n int
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = d.q.groups.Fingerprint(ctx, tx, params)
		return err
	})
	if err != nil {
		return 0, wrap("dead-letter fingerprint", err)
	}
	return n, nil
}

// DeadLetterGroups lists the failure groups largest first, each with its
// newest dead letter as sample.
func (d *Driver) DeadLetterGroups(ctx context.Context, params *store.DeadLetterGroupsParams) ([]*store.DeadLetterGroup, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	groups, err := d.q.groups.ListGroups(ctx, d.db, params)
	if err != nil {
		return nil, wrap("dead-letter groups", err)
	}
	return groups, nil
}
