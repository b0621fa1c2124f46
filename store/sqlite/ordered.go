package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/txbox/txbox/store/internal/sqlstore"
)

// maxKeyRun bounds OutboxClaimParams.KeyRun: a longer run would only be
// sent in more waves than a lease allows for.
const maxKeyRun = 10_000

// orderedClaim is one ordered-by-key claim (docs/schema/postgres.md, "Ordered
// claim"), run inside the claim's write transaction. SQLite has one writer,
// so it needs no SKIP LOCKED: it picks the ids with a few indexed queries
// driven from Go (in process, microseconds each) and claims them with one
// UPDATE. It reads O(batch) index entries however many rows wait behind
// one key:
//
//   - the keyless window: the type's oldest due PENDING rows after the
//     keyless sweep cursor, limit rows, of which those without a key are
//     taken (rows without a key are unordered);
//   - the key walk: a loose index scan over the key index (event_type,
//     event_key, rowid), which holds only PENDING, IN_PROCESS and FAILED
//     rows. Each step reads the next key after the previous one (starting
//     after the key cursor, wrapping around once) and its first run
//     entries in rowid order (a key's order: the writers' order), and takes the longest prefix that is PENDING and due; a head
//     in process, failed or not due yet, or a parked key, yields nothing.
//     The walk stops at limit rows or after maxWalk keys.
type orderedClaim struct {
	typ   string
	route string
	limit int
	run   int
	lease string
	cur   *sqlstore.Cursor
}

// maxWalk bounds the keys one ordered claim visits; see the PostgreSQL
// driver's claim, which shares the bound.
func maxWalk(limit int) int { return 4*limit + 64 }

// pick returns the ids to claim.
func (o *orderedClaim) pick(ctx context.Context, d *Driver, tx *sql.Tx) ([]string, error) {
	after, _, sweepDue, sweepID := o.cur.Start(time.Now())
	var ids []string
	// Keyless rows.
	rows, err := d.txQuery(ctx, tx, d.q.orderedWindow, o.typ, sweepDue, sweepID, o.limit, o.route)
	if err != nil {
		return nil, err
	}
	window := 0
	var lastDue, lastID string
	for rows.Next() {
		var id, due, key string
		if err := rows.Scan(&id, &due, &key); err != nil {
			rows.Close()
			return nil, err
		}
		window++
		lastDue, lastID = due, id
		if key == "" {
			ids = append(ids, id)
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The key walk.
	key, wrapped, last := after, false, after
	for steps := 0; len(ids) < o.limit && steps < maxWalk(o.limit); steps++ {
		next, run, err := o.key(ctx, d, tx, key, min(o.run, o.limit-len(ids)))
		if err != nil {
			return nil, err
		}
		if next == "" {
			if wrapped || after == "" {
				break // every key visited
			}
			key, wrapped = "", true
			continue
		}
		if wrapped && next > after {
			break // a full lap
		}
		ids = append(ids, run...)
		key, last = next, next
	}
	o.cur.Claimed(time.Now(), last, last != "", window, o.limit, lastDue, lastID)
	return ids, nil
}

// key reads the first key after after and the claimable prefix of its
// first n rows. It returns "" when there is no such key.
func (o *orderedClaim) key(ctx context.Context, d *Driver, tx *sql.Tx, after string, n int) (string, []string, error) {
	rows, err := d.txQuery(ctx, tx, d.q.orderedKey, o.typ, after, n, o.route)
	if err != nil {
		return "", nil, err
	}
	defer rows.Close()
	var (
		key  string
		run  []string
		stop bool
	)
	for rows.Next() {
		var (
			id         string
			ok, parked bool
		)
		if err := rows.Scan(&key, &id, &ok, &parked); err != nil {
			return "", nil, err
		}
		if parked || !ok {
			stop = true
		}
		if !stop {
			run = append(run, id)
		}
	}
	return key, run, rows.Err()
}

func (d *Driver) orderedCursor(eventType string) *sqlstore.Cursor { return d.ordered.Get(eventType) }

// idsJSON encodes ids as a JSON array for json_each.
func idsJSON(ids []string) string {
	b, _ := json.Marshal(ids) // strings always encode
	return string(b)
}
