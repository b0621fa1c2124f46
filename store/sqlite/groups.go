package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// groupQueries are the statements of the failure groups. SQLite has one
// writer at a time, so the unprinted rows need no lock.
func groupQueries(q *queries, r *strings.Replacer) {
	groups, sample := sqlstore.GroupStatements(r.Replace("{dead_letter}"))
	q.groups = sqlstore.GroupSQL{
		Unprinted: r.Replace(`SELECT id, event_type, route, attempts, coalesce(last_error, '') FROM {dead_letter}
WHERE fingerprint IS NULL LIMIT ?`),
		Print: r.Replace(`UPDATE {dead_letter} SET fingerprint = ?, failure_class = ?, failure_message = ?, destination = ?
WHERE id = ? AND fingerprint IS NULL`),
		Groups: groups,
		Sample: sample,
		ScanID: func(id *txbox.ID) any {
			return textScan(func(s string) (err error) { *id, err = txbox.ParseID(s); return err })
		},
		ScanTime: func(t *time.Time) any {
			return textScan(func(s string) (err error) { *t, err = parseTime(s); return err })
		},
	}
}

// textScan scans a text column through its function; NULL scans as "".
type textScan func(string) error

func (f textScan) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		return f("")
	case string:
		return f(v)
	case []byte:
		return f(string(v))
	}
	return fmt.Errorf("sqlite: cannot scan %T as text", src)
}

// DeadLetterFingerprint fingerprints up to Limit dead letters that have
// none, in one write transaction.
func (d *Driver) DeadLetterFingerprint(ctx context.Context, params *store.DeadLetterFingerprintParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, fmt.Errorf("%w: dead-letter fingerprint Limit must be ≥ 1", ErrInvalidParams)
	}
	var n int
	err := d.write(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = d.q.groups.Fingerprint(ctx, tx, params)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("dead-letter fingerprint: %w", err)
	}
	return n, nil
}

// DeadLetterGroups lists the failure groups largest first, each with its
// newest dead letter as sample.
func (d *Driver) DeadLetterGroups(ctx context.Context, params *store.DeadLetterGroupsParams) ([]*store.DeadLetterGroup, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	groups, err := d.q.groups.ListGroups(ctx, d.db, params)
	if err != nil {
		return nil, d.translate(fmt.Errorf("dead-letter groups: %w", err))
	}
	return groups, nil
}
