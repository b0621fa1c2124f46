package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// GroupSQL holds a dialect's statements for the failure groups of dead
// letters; its methods run them the same way for every dialect.
type GroupSQL struct {
	// Unprinted reads id, event_type, route, attempts and last_error (never
	// NULL) of at most ? dead letters with no fingerprint, locking them
	// where the dialect can (FOR UPDATE, in index order, not SKIP
	// LOCKED: fewer than the limit must mean none was left).
	Unprinted string
	// Print sets fingerprint, failure_class, failure_message and
	// destination (four placeholders) of the dead letter id = ? when it
	// has no fingerprint yet.
	Print string
	// Groups reads fingerprint, count, min and max failed_at of the
	// groups, largest first. Its placeholders: the status twice (empty
	// for all), a cursor flag (0: no cursor), the cursor's count twice
	// and fingerprint, the limit.
	Groups string
	// Sample reads id, event_type, destination, failure_class,
	// failure_message and last_error (none NULL) of the newest dead
	// letter of the group ? in the status ? (twice; empty for all).
	Sample string
	// ScanID and ScanTime return the scan destinations of an id and of a
	// failed_at value.
	ScanID   func(*txbox.ID) any
	ScanTime func(*time.Time) any
}

// Fingerprint fingerprints the dead letters Unprinted finds, inside tx,
// and returns how many it wrote.
func (q GroupSQL) Fingerprint(ctx context.Context, tx *sql.Tx, params *store.DeadLetterFingerprintParams) (int, error) {
	rows, err := tx.QueryContext(ctx, q.Unprinted, params.Limit)
	if err != nil {
		return 0, err
	}
	ins, err := Collect(rows, []store.FingerprintInput(nil), func(r *sql.Rows) (store.FingerprintInput, error) {
		var in store.FingerprintInput
		err := r.Scan(q.ScanID(&in.ID), &in.EventType, &in.Route, &in.Attempts, &in.LastError)
		return in, err
	})
	if err != nil || len(ins) == 0 {
		return 0, err
	}
	stmt, err := tx.PrepareContext(ctx, q.Print)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	print, n := params.Printer(), 0
	for i := range ins {
		f := print(&ins[i]).Stored(ins[i].ID)
		k, err := Affected(stmt.ExecContext(ctx, f.Key, f.Class, f.Message, f.Destination, f.ID.String()))
		if err != nil {
			return 0, err
		}
		n += int(k)
	}
	return n, nil
}

// ListGroups lists a page of groups, each with its newest dead letter as
// sample; params must have been validated.
func (q GroupSQL) ListGroups(ctx context.Context, db *sql.DB, params *store.DeadLetterGroupsParams) ([]*store.DeadLetterGroup, error) {
	hasCursor, count, after := 0, int64(0), ""
	if params.After != nil {
		hasCursor, count, after = 1, params.After.Count, params.After.Fingerprint
	}
	rows, err := db.QueryContext(ctx, q.Groups, params.Status, params.Status, hasCursor, count, count, after, params.Limit)
	if err != nil {
		return nil, err
	}
	groups, err := Collect(rows, []*store.DeadLetterGroup(nil), func(r *sql.Rows) (*store.DeadLetterGroup, error) {
		g := &store.DeadLetterGroup{}
		err := r.Scan(&g.Fingerprint, &g.Count, q.ScanTime(&g.FirstFailedAt), q.ScanTime(&g.LastFailedAt))
		return g, err
	})
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		err := db.QueryRowContext(ctx, q.Sample, g.Fingerprint, params.Status, params.Status).
			Scan(q.ScanID(&g.SampleID), &g.EventType, &g.Destination, &g.Class, &g.Message, &g.SampleError)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	return groups, nil
}

// GroupStatements returns the Groups and Sample statements over the
// dead-letter table table (quoted), the same SQL on every dialect.
func GroupStatements(table string) (groups, sample string) {
	groups = `SELECT fingerprint, COUNT(*), MIN(failed_at), MAX(failed_at) FROM ` + table + `
		WHERE fingerprint IS NOT NULL AND (? = '' OR status = ?)
		GROUP BY fingerprint
		HAVING ? = 0 OR COUNT(*) < ? OR (COUNT(*) = ? AND fingerprint < ?)
		ORDER BY COUNT(*) DESC, fingerprint DESC
		LIMIT ?`
	sample = `SELECT id, event_type, COALESCE(destination, ''), COALESCE(failure_class, ''), COALESCE(failure_message, ''), COALESCE(last_error, '')
		FROM ` + table + ` WHERE fingerprint = ? AND (? = '' OR status = ?)
		ORDER BY failed_at DESC, id DESC LIMIT 1`
	return groups, sample
}
