package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"sort"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// maxKeyRun bounds OutboxClaimParams.KeyRun: a longer run would only be
// sent in more waves than a lease allows for.
const maxKeyRun = 10_000

// maxKeyChunk bounds the keys one round trip of the key walk reads; a
// chunk asks for as many keys as the rows still wanted need at run rows
// each, plus a few for keys that turn out blocked.
const maxKeyChunk = 32

func keyChunk(wanted, run int) int {
	return min(maxKeyChunk, (wanted+run-1)/run+4)
}

// maxWalk bounds the keys one ordered claim visits (see the PostgreSQL
// driver, which shares the bound): only blocked keys make a walk longer
// than the batch.
func maxWalk(limit int) int { return 4*limit + 64 }

// claimOrderedIn is the ordered-by-key claim (docs/schema/mysql.md and
// docs/schema/postgres.md, "Ordered claim"), inside the claim's READ COMMITTED
// transaction. It reads O(batch) index entries however many rows wait
// behind one key, where a scan of the claim index in due order would pass
// every row of a blocked key:
//
//   - the keyless window: the type's oldest due PENDING rows after the
//     keyless sweep cursor, through txbox_claim; those without a key are
//     unordered and taken;
//   - the key walk, a loose index scan over txbox_order (event_type,
//     status, event_key, id): the next few keys with PENDING rows after
//     the key cursor (wrapping around once), then, in one statement (one
//     read view), each key's first run PENDING rows in id order, the
//     smallest id of its IN_PROCESS and FAILED rows and whether an
//     unresolved dead letter parks it. A key's run is its PENDING rows
//     from the first, while each is due and below every IN_PROCESS or
//     FAILED row of the key;
//   - the rows chosen are locked FOR UPDATE SKIP LOCKED in primary-key
//     order, and a key keeps only the prefix of its run this transaction
//     locked, so two relays never hold rows of one key that are not
//     contiguous.
func (d *Driver) claimOrderedIn(ctx context.Context, tx *sql.Tx, params *store.OutboxClaimParams, token txbox.ID, lock bool) ([]*store.OutboxRow, error) {
	cur := d.orderedCursor(params.EventType)
	after, hasAfter, sweepDue, sweepID := cur.Start(time.Now())
	if sweepDue == "" {
		sweepDue = sweepStart
	}
	limit, run := params.Limit, max(params.KeyRun, 1)
	kw, err := d.keylessWindow(ctx, tx, params.EventType, params.Route, sweepDue, sweepID, limit)
	if err != nil {
		return nil, err
	}
	w := keyWalk{typ: params.EventType, route: params.Route, after: after, hasAfter: hasAfter, limit: limit, run: run, total: len(kw.ids)}
	if err := d.walkKeys(ctx, tx, &w); err != nil {
		return nil, err
	}
	cur.Claimed(time.Now(), w.last, w.lastSet, kw.size, limit, kw.lastDue, kw.lastID)
	out, err := d.lockOrdered(ctx, tx, params.EventType, token, kw.ids, w.runs)
	if err != nil || len(out) == 0 || lock {
		return out, err
	}
	if err := d.markInProcess(ctx, tx, out, params.LeaseDuration, token); err != nil {
		return nil, err
	}
	return out, nil
}

// keyless is what the keyless window read: the ids of its rows without a
// key, in (due_at, id) order, how many rows it read, and the (due_at, id)
// of the last, where the sweep goes on from.
type keyless struct {
	ids             []string
	size            int
	lastDue, lastID string
}

// keylessWindow reads the type's oldest due PENDING rows after the keyless
// sweep cursor (sweepDue, sweepID), at most limit, through txbox_claim.
func (d *Driver) keylessWindow(ctx context.Context, tx *sql.Tx, typ, route, sweepDue, sweepID string, limit int) (keyless, error) {
	var kw keyless
	rows, err := tx.QueryContext(ctx, d.q.orderedWindow, typ, route, sweepDue, sweepDue, sweepID, limit)
	if err != nil {
		return kw, err
	}
	for rows.Next() {
		var id, due string
		var noKey bool
		if err := rows.Scan(&id, &due, &noKey); err != nil {
			rows.Close()
			return kw, err
		}
		kw.size++
		kw.lastDue, kw.lastID = due, id
		if noKey {
			kw.ids = append(kw.ids, id)
		}
	}
	if err := rows.Close(); err != nil {
		return kw, err
	}
	return kw, rows.Err()
}

// keyRun is one key's claimable run, ids in id order.
type keyRun struct {
	key []byte
	ids []string
}

// keyWalk is the state of one claim's key walk: where it starts (the key
// cursor), its bounds, and what it found.
type keyWalk struct {
	typ, route string
	after      string
	hasAfter   bool
	limit, run int
	total      int // rows found so far, the keyless ones included
	runs       []keyRun
	last       string // the last key walked
	lastSet    bool
}

// walkKeys visits keys with PENDING rows after the key cursor (wrapping
// around once), a chunk per round trip, and collects their runs until the
// claim has limit rows or visited maxWalk(limit) keys.
func (d *Driver) walkKeys(ctx context.Context, tx *sql.Tx, w *keyWalk) error {
	pos, posSet, wrapped := w.after, w.hasAfter, false
	w.last, w.lastSet = w.after, w.hasAfter
	for steps := 0; w.total < w.limit && steps < maxWalk(w.limit); {
		keys, err := d.pendingKeys(ctx, tx, w.typ, w.route, pos, posSet, keyChunk(w.limit-w.total, w.run))
		if err != nil {
			return err
		}
		if wrapped && w.hasAfter {
			// A full lap ends at the cursor.
			n := 0
			for n < len(keys) && bytes.Compare(keys[n], []byte(w.after)) <= 0 {
				n++
			}
			keys = keys[:n]
		}
		if len(keys) == 0 {
			if wrapped || !w.hasAfter {
				break
			}
			pos, posSet, wrapped = "", false, true
			continue
		}
		found, err := d.keyRuns(ctx, tx, w.typ, w.route, keys, w.run)
		if err != nil {
			return err
		}
		for _, k := range keys {
			steps++
			ids := found[string(k)]
			if len(ids) > w.limit-w.total {
				ids = ids[:w.limit-w.total]
			}
			if len(ids) > 0 {
				w.runs = append(w.runs, keyRun{key: k, ids: ids})
				w.total += len(ids)
			}
			w.last, w.lastSet = string(k), true
			if w.total >= w.limit || steps >= maxWalk(w.limit) {
				break
			}
		}
		pos, posSet = w.last, true
	}
	return nil
}

// lockOrdered locks the chosen rows FOR UPDATE SKIP LOCKED in primary-key
// order and keeps the keyless ones it locked and each key's locked prefix
// of its run, in (due_at, id) order.
func (d *Driver) lockOrdered(ctx context.Context, tx *sql.Tx, typ string, token txbox.ID, keyless []string, runs []keyRun) ([]*store.OutboxRow, error) {
	var ids []string
	ids = append(ids, keyless...)
	for _, r := range runs {
		ids = append(ids, r.ids...)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	locked, due, err := d.lockRows(ctx, tx, typ, token, ids)
	if err != nil {
		return nil, err
	}
	var out []*store.OutboxRow
	for _, id := range keyless {
		if r := locked[id]; r != nil {
			out = append(out, r)
		}
	}
	for _, kr := range runs {
		for _, id := range kr.ids {
			r := locked[id]
			if r == nil {
				break // another claimer holds it: the run ends here
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := due[out[i].ID.String()], due[out[j].ID.String()]
		if !a.Equal(b) {
			return a.Before(b)
		}
		return bytes.Compare(out[i].ID[:], out[j].ID[:]) < 0
	})
	return out, nil
}

// lockRows locks those of ids that are still PENDING and due, skipping
// rows another transaction holds, and returns them and their due times by
// id.
func (d *Driver) lockRows(ctx context.Context, tx *sql.Tx, typ string, token txbox.ID, ids []string) (map[string]*store.OutboxRow, map[string]time.Time, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := tx.QueryContext(ctx, inIDs(d.q.orderedLock, len(ids)), args...)
	if err != nil {
		return nil, nil, err
	}
	locked := map[string]*store.OutboxRow{}
	due := map[string]time.Time{}
	for rows.Next() {
		r := &store.OutboxRow{EventType: typ, LeaseToken: token}
		var key, headers []byte
		var dueAt time.Time
		if err := rows.Scan(idScan{&r.ID}, &key, &r.Payload, &headers, &r.Attempts, nullTime{&r.CreatedAt}, nullTime{&dueAt}, &r.Route, idScan{&r.EventID}); err != nil {
			rows.Close()
			return nil, nil, err
		}
		claimedRow(r, key, headers)
		locked[r.ID.String()] = r
		due[r.ID.String()] = dueAt
	}
	if err := rows.Close(); err != nil {
		return nil, nil, err
	}
	return locked, due, rows.Err()
}

// pendingKeys returns up to n keys of typ with PENDING rows of route after
// after (from the first key when posSet is false), in key order: a loose
// index scan of txbox_order (event_type, route, status, event_key, id).
func (d *Driver) pendingKeys(ctx context.Context, tx *sql.Tx, typ, route, after string, posSet bool, n int) ([][]byte, error) {
	q, args := d.q.pendingKeysFirst, []any{typ, route}
	if posSet {
		q = d.q.pendingKeysAfter
		args = append(args, []byte(after))
	}
	args = append(args, n)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var (
			k               []byte
			typ2, rt2, stat string
		)
		if err := rows.Scan(&typ2, &rt2, &stat, &k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// keyRuns reads, in one statement, each key's claimable run of at most run
// rows of route: its PENDING rows in id order from the first, while each is
// due and has a smaller id than every IN_PROCESS or FAILED row of the key
// and route (and, for a route other than "", every row of the key with
// route "" not done: an event not expanded yet); none when an unresolved
// dead letter of the route or of route "" parks the key.
func (d *Driver) keyRuns(ctx context.Context, tx *sql.Tx, typ, route string, keys [][]byte, run int) (map[string][]string, error) {
	var q strings.Builder
	var args []any
	for i, k := range keys {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString(d.q.keyRun)
		args = append(args, i, typ, route, k, run, i, typ, route, k, typ, k, route)
		if route != "" {
			q.WriteString(d.q.keyRunUnexpanded)
			args = append(args, i, typ, k, i, typ, k)
		}
	}
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type keyState struct {
		pending []string
		due     []bool
		blocker string
		parked  bool
	}
	states := make([]keyState, len(keys))
	for rows.Next() {
		var (
			i, kind int
			id      sql.NullString
			flag    bool
		)
		if err := rows.Scan(&i, &kind, &id, &flag); err != nil {
			return nil, err
		}
		if i < 0 || i >= len(keys) {
			continue
		}
		s := &states[i]
		if kind == 0 {
			s.pending = append(s.pending, id.String)
			s.due = append(s.due, flag)
			continue
		}
		// kind 1 (the route's own) or 2 (route ""): the key is held
		// from the smaller of their ids.
		s.parked = s.parked || (kind == 1 && flag)
		if id.Valid && (s.blocker == "" || id.String < s.blocker) {
			s.blocker = id.String
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(keys))
	for i, k := range keys {
		s := &states[i]
		if s.parked {
			continue
		}
		// UNION ALL keeps no order: sort the key's PENDING rows by id.
		idx := make([]int, len(s.pending))
		for j := range idx {
			idx[j] = j
		}
		sort.Slice(idx, func(a, b int) bool { return s.pending[idx[a]] < s.pending[idx[b]] })
		var run []string
		for _, j := range idx {
			if !s.due[j] || (s.blocker != "" && s.pending[j] > s.blocker) {
				break
			}
			run = append(run, s.pending[j])
		}
		out[string(k)] = run
	}
	return out, nil
}

// sweepStart is below every DATETIME(6) value: the keyless window's lower
// bound when the sweep starts from the oldest row.
const sweepStart = "1000-01-01 00:00:00.000000"

func (d *Driver) orderedCursor(eventType string) *sqlstore.Cursor { return d.ordered.Get(eventType) }
