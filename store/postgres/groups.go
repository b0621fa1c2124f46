package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// DeadLetterFingerprint fingerprints up to Limit dead letters that have
// none, in one transaction: it locks them, computes each fingerprint with
// params.Print and writes them in one UPDATE. A row another caller holds
// is waited for, then skipped when that caller fingerprinted it: so fewer
// than Limit means none was left (the groups listing's "complete"), which
// SKIP LOCKED could not say. Both lock in id order and never deadlock. A
// dead letter retried or deleted meanwhile is locked out.
func (d *Driver) DeadLetterFingerprint(ctx context.Context, params *store.DeadLetterFingerprintParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, errBadParams("dead-letter fingerprint", "limit must be at least 1")
	}
	print := params.Printer()
	var n int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, d.q.dlUnprinted, params.Limit)
		if err != nil {
			return err
		}
		ins, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.FingerprintInput, error) {
			var in store.FingerprintInput
			err := row.Scan(uuidDest{&in.ID}, &in.EventType, &in.Route, &in.Attempts, &in.LastError)
			return in, err
		})
		if err != nil || len(ins) == 0 {
			return err
		}
		ids := make([]txbox.ID, len(ins))
		var keys, classes, messages, dests []string
		for i := range ins {
			f := print(&ins[i]).Stored(ins[i].ID)
			ids[i] = f.ID
			keys, classes = append(keys, f.Key), append(classes, f.Class)
			messages, dests = append(messages, f.Message), append(dests, f.Destination)
		}
		tag, err := tx.Exec(ctx, d.q.dlPrint, pgUUIDs(ids), keys, classes, messages, dests)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, d.translate("dead-letter fingerprint", err)
	}
	return int(n), nil
}

// DeadLetterGroups lists the failure groups largest first, each with its
// newest dead letter as sample: one aggregate over dead_letter_group_idx,
// then one index lookup per group.
func (d *Driver) DeadLetterGroups(ctx context.Context, params *store.DeadLetterGroupsParams) ([]*store.DeadLetterGroup, error) {
	if err := params.Validate(); err != nil {
		return nil, errBadParams("dead-letter groups", "%s", err)
	}
	count, after := pgtype.Int8{}, ""
	if params.After != nil {
		count, after = pgtype.Int8{Int64: params.After.Count, Valid: true}, params.After.Fingerprint
	}
	rows, err := d.pool.Query(ctx, d.q.dlGroups, params.Status, count, after, params.Limit)
	if err != nil {
		return nil, d.translate("dead-letter groups", err)
	}
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.DeadLetterGroup, error) {
		g := &store.DeadLetterGroup{}
		err := row.Scan(&g.Fingerprint, &g.Count, &g.FirstFailedAt, &g.LastFailedAt)
		return g, err
	})
	if err != nil {
		return nil, d.translate("dead-letter groups", err)
	}
	for _, g := range groups {
		err := d.pool.QueryRow(ctx, d.q.dlGroupSample, g.Fingerprint, params.Status).
			Scan(uuidDest{&g.SampleID}, &g.EventType, &g.Destination, &g.Class, &g.Message, &g.SampleError)
		if err != nil && err != pgx.ErrNoRows {
			return nil, d.translate("dead-letter group sample", err)
		}
	}
	return groups, nil
}
