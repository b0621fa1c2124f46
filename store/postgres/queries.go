package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds every statement of the driver, rendered once in New with
// the validated, quoted table names. Their text never changes afterwards,
// so pgx's statement cache prepares each one once per connection.
type queries struct {
	insertNative, insertNativeNotify string
	insertText, insertTextNotify     string
	insertOne, insertOneNotify       string
	notify                           string
	// WAL mode (wal_emit.go): emit one message or a batch.
	walEmitOne, walEmitNative, walEmitText string

	claim        string
	finish       string
	recover      string
	pendingTypes string
	stats        string
	cleanup      string
	// The lock claim (lock.go): claim, finish and dead-letter move.
	lockClaim, lockFinish, lockDLMove string

	dlMove, dlList, dlListIDs, dlCount, dlGet string
	// Failure groups (groups.go).
	dlUnprinted, dlPrint, dlGroups, dlGroupSample string
	dlRetry, dlResolve, dlDelete                  string
	dlCleanup                                     string

	audit auditQueries

	leaseAcquire, leaseRelease string

	inspectGroups, inspectLastError, parkedKeys string
	horizonHolder                               string
	instanceBeat, instanceList, instanceRemove  string

	inboxRecordNative, inboxRecordText, inboxCleanup string

	migrateLock, createSchema                                  string
	schemaVersionCreate, schemaVersionMax, schemaVersionInsert string
}

// render replaces {{outbox}}, {{dead_letter}}, {{lease}} and {{inbox}} in
// s.
func (d *Driver) render(s string) string {
	return strings.NewReplacer(
		"{{outbox}}", d.table(d.tables.Outbox),
		"{{dead_letter}}", d.table(d.tables.DeadLetter),
		"{{lease}}", d.table(d.tables.Lease),
		"{{inbox}}", d.table(d.tables.Inbox),
		"{{instance}}", d.table(d.tables.Instance),
	).Replace(s)
}

// The insert reads one array per column (%[1]s). not_before is NULL or a
// time; GREATEST ignores NULL, so due_at is now() or the later not-before.
const insertBody = `
	INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, due_at)
	SELECT u.id, u.event_type, NULLIF(u.event_key, ''), u.payload, u.headers::jsonb, GREATEST(now(), u.not_before)
	FROM unnest(%[1]s) AS u(id, event_type, event_key, payload, headers, not_before)`

const insertNativeArgs = `$1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::timestamptz[]`

// database/sql drivers bind every array as one text parameter.
const insertTextArgs = `$1::text::uuid[], $2::text::text[], $3::text::text[], $4::text::bytea[], $5::text::text[], $6::text::timestamptz[]`

// The notifying variant wraps the insert in a CTE and sends one
// notification per distinct event type; PostgreSQL delivers them only when
// the caller's transaction commits, and folds duplicates within it.
func insertSQL(args string, notify bool) string {
	body := fmt.Sprintf(insertBody, args)
	if !notify {
		return body
	}
	return `WITH ins AS (` + body + `
	RETURNING event_type)
	SELECT pg_notify($7, t.event_type) FROM (SELECT DISTINCT event_type FROM ins) t`
}

// insertOneBody is the single-event statement: plain parameters instead
// of arrays, which saves the array encoding on both sides and the unnest
// scan on the most common publish (one event in a business transaction).
// Scalar parameters bind the same way through pgx and database/sql.
const insertOneBody = `
	INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, due_at)
	VALUES ($1::uuid, $2::text, NULLIF($3::text, ''), $4::bytea, $5::text::jsonb, GREATEST(now(), $6::timestamptz))`

// buildQueries renders every statement for d's tables, area by area.
func buildQueries(d *Driver) queries {
	var q queries
	d.publishQueries(&q)
	d.claimQueries(&q)
	d.finishQueries(&q)
	d.statsQueries(&q)
	d.deadLetterQueries(&q)
	d.auditSQL(&q)
	d.inspectQueries(&q)
	d.leaseQueries(&q)
	d.inboxQueries(&q)
	d.schemaQueries(&q)
	return q
}

// publishQueries: one event, a batch (pgx arrays or database/sql
// text), each with or without NOTIFY.
func (d *Driver) publishQueries(q *queries) {
	q.notify = `SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t`
	q.insertOne = d.render(insertOneBody)
	q.insertOneNotify = d.render(`WITH ins AS (` + insertOneBody + `
	RETURNING event_type)
	SELECT pg_notify($7, event_type) FROM ins`)
	q.insertNative = d.render(insertSQL(insertNativeArgs, false))
	q.insertNativeNotify = d.render(insertSQL(insertNativeArgs, true))
	q.insertText = d.render(insertSQL(insertTextArgs, false))
	q.insertTextNotify = d.render(insertSQL(insertTextArgs, true))
	d.walQueries(q)
}

// claimWhere selects the claim's candidates: due PENDING rows of type $1
// and route $8 after the cursor ($5, $6) lowered by the lookback ($7 µs).
const claimWhere = `o.status = 'PENDING' AND o.event_type = $1 AND o.route = $8 AND o.due_at <= now()
		  AND (o.due_at, o.id) > (
			LEAST($5::timestamptz, now() - $7::float8 * interval '1 microsecond'),
			CASE WHEN $5::timestamptz < now() - $7::float8 * interval '1 microsecond'
			     THEN $6::uuid ELSE '00000000-0000-0000-0000-000000000000'::uuid END)`

// lockArgs renumbers a claim statement's parameters for the lock claim,
// which drops the lease duration ($3) and token ($4): $5..$10 become
// $3..$8.
func lockArgs(s string) string {
	return strings.NewReplacer("$5", "$3", "$6", "$4", "$7", "$5", "$8", "$6", "$9", "$7", "$10", "$8").Replace(s)
}

// claimQueries: the claim and the recovery of expired leases.
func (d *Driver) claimQueries(q *queries) {
	q.claim = d.render(`
	WITH picked AS (
		SELECT o.id FROM {{outbox}} o
		WHERE ` + claimWhere + d.ownedSQL("o") + `
		ORDER BY o.due_at, o.id
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	UPDATE {{outbox}} AS u
	SET status = 'IN_PROCESS', lease_until = now() + $3::float8 * interval '1 microsecond', lease_token = $4
	FROM picked
	WHERE u.id = picked.id
	RETURNING u.id, u.event_type, COALESCE(u.event_key, ''), u.payload, u.headers, u.attempts, u.created_at, u.due_at, u.route, u.event_id`)
	// The lock claim (lock.go) selects the same rows and only locks them;
	// it has no lease arguments, so $5.. become $3...
	q.lockClaim = d.render(lockArgs(`
	SELECT o.id, o.event_type, COALESCE(o.event_key, ''), o.payload, o.headers, o.attempts, o.created_at, o.due_at, o.route, o.event_id
	FROM {{outbox}} o
	WHERE ` + claimWhere + d.ownedSQL("o") + `
	ORDER BY o.due_at, o.id
	LIMIT $2
	FOR UPDATE SKIP LOCKED`))

	q.recover = d.render(`
	WITH r AS (
		SELECT id FROM {{outbox}}
		WHERE status = 'IN_PROCESS' AND lease_until < now()
		ORDER BY lease_until
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	)
	UPDATE {{outbox}} o
	SET status = 'PENDING', due_at = now(), lease_until = NULL, lease_token = NULL
	FROM r WHERE o.id = r.id`)
}

// finishQueries: the fenced finish and the cleanup of processed rows.
func (d *Driver) finishQueries(q *queries) {
	// Outcomes: 0 acked, 1 retry, 2 failed, 3 released (store.Outcome).
	//
	// The fence is lease_token alone: a claim sets it together with
	// IN_PROCESS and every transition out of IN_PROCESS clears it, so a
	// matching token implies the row is still ours. Leaving status out of
	// the WHERE clause is deliberate: with it the planner may pick the
	// IN_PROCESS partial index (whose statistics lag far behind a queue's
	// churn) as the outer side of a nested loop and compare every
	// in-process row with every item; without it each item is one
	// primary-key probe.
	q.finish = d.render(`
	WITH items AS MATERIALIZED (
		SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::bigint[], $5::text[])
			AS i(id, token, outcome, delay_us, err)
	),
	del AS (
		DELETE FROM {{outbox}} o USING items i
		WHERE $6::bool AND i.outcome = 0
		  AND o.id = i.id AND o.lease_token = i.token
		RETURNING o.id
	),
	upd AS (
		UPDATE {{outbox}} o SET
			status = CASE i.outcome WHEN 0 THEN 'PROCESSED' WHEN 2 THEN 'FAILED' ELSE 'PENDING' END,
			-- A FAILED row's processed_at is when it failed: the
			-- dead-letter mover copies it into failed_at.
			processed_at = CASE WHEN i.outcome IN (0, 2) THEN now() END,
			attempts = o.attempts + CASE WHEN i.outcome IN (1, 2) THEN 1 ELSE 0 END,
			due_at = CASE WHEN i.outcome IN (1, 3) THEN now() + i.delay_us * interval '1 microsecond' ELSE o.due_at END,
			last_error = CASE WHEN i.outcome IN (1, 2) THEN i.err ELSE o.last_error END,
			lease_until = NULL,
			lease_token = NULL
		FROM items i
		WHERE NOT ($6::bool AND i.outcome = 0)
		  AND o.id = i.id AND o.lease_token = i.token
		RETURNING o.id
	)
	SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd)`)

	// The lock claim's finish: the rows are ours by the transaction's
	// locks, not by a token, so the fence is "still the PENDING row we
	// locked" (lock.go).
	// now() is the transaction's start, the claim; retry delays and
	// processed_at count from the finish, so it reads the clock.
	q.lockFinish = strings.NewReplacer("o.lease_token = i.token", "o.lease_token IS NULL AND o.status = 'PENDING'",
		"now()", "clock_timestamp()").Replace(q.finish)

	q.cleanup = d.render(cleanupSQL("{{outbox}}", "PROCESSED", "processed_at"))
}

// cleanupSQL deletes the $2 oldest rows of table in status whose time
// column is more than $1 microseconds ago, oldest first; rows another
// cleaner holds are skipped. The outbox and the dead letters share it.
func cleanupSQL(table, status, column string) string {
	return `
	DELETE FROM ` + table + ` WHERE id IN (
		SELECT id FROM ` + table + `
		WHERE status = '` + status + `' AND ` + column + ` < now() - $1::float8 * interval '1 microsecond'
		ORDER BY ` + column + `
		LIMIT $2
		FOR UPDATE SKIP LOCKED)`
}

// statsQueries: pending-types discovery and per-type stats.
func (d *Driver) statsQueries(q *queries) {
	// A loose index scan over the claim index: one index probe per
	// distinct type instead of reading every pending row.
	q.pendingTypes = d.render(`
	WITH RECURSIVE t(event_type) AS (
		(SELECT event_type FROM {{outbox}} WHERE status = 'PENDING' ORDER BY event_type LIMIT 1)
		UNION ALL
		SELECT (SELECT o.event_type FROM {{outbox}} o
		        WHERE o.status = 'PENDING' AND o.event_type > t.event_type
		        ORDER BY o.event_type LIMIT 1)
		FROM t WHERE t.event_type IS NOT NULL
	)
	SELECT event_type FROM t WHERE event_type IS NOT NULL`)

	// Each branch reads one partial index, so the processed history (which
	// may be most of the table) is never scanned.
	q.stats = d.render(`
	SELECT event_type, 'P', count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
	FROM {{outbox}} WHERE status = 'PENDING' GROUP BY event_type
	UNION ALL
	SELECT event_type, 'I', count(*), 0 FROM {{outbox}} WHERE status = 'IN_PROCESS' GROUP BY event_type
	UNION ALL
	SELECT event_type, 'F', count(*), 0 FROM {{outbox}} WHERE status = 'FAILED' GROUP BY event_type`)
}

func (d *Driver) deadLetterQueries(q *queries) {
	// One statement is one transaction: lock FAILED rows, delete them and
	// insert them into the dead-letter table, or none of it. failed_at is
	// when the row failed (its processed_at, set by the finish), not when
	// it moved; rows failed before that was recorded get the move time.
	q.dlMove = d.render(`
	WITH f AS (
		SELECT id FROM {{outbox}} WHERE status = 'FAILED'
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
	),
	gone AS (
		DELETE FROM {{outbox}} o USING f WHERE o.id = f.id
		RETURNING o.id, o.event_type, o.event_key, o.payload, o.headers, o.attempts, o.last_error, o.created_at, o.processed_at, o.txid, o.route, o.event_id
	),
	ins AS (
		INSERT INTO {{dead_letter}} AS x (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at, txid, route, event_id)
		SELECT id, event_type, event_key, payload, headers, attempts, last_error, created_at, COALESCE(processed_at, now()), txid, route, event_id FROM gone
		ON CONFLICT (id) DO UPDATE SET
			event_type = EXCLUDED.event_type, event_key = EXCLUDED.event_key, payload = EXCLUDED.payload,
			headers = EXCLUDED.headers, attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
			created_at = EXCLUDED.created_at, failed_at = EXCLUDED.failed_at, status = 'UNRESOLVED', resolved_at = NULL,
			txid = EXCLUDED.txid, route = EXCLUDED.route, event_id = EXCLUDED.event_id,
			-- A new failure: fingerprinted again (DeadLetterFingerprint).
			fingerprint = NULL, failure_class = NULL, failure_message = NULL, destination = NULL
		RETURNING 1
	)
	SELECT count(*) FROM ins`)

	// The lock claim's finish moves the rows it failed in its own
	// transaction, by id; they are locked already.
	q.lockDLMove = strings.Replace(q.dlMove, `SELECT id FROM `+d.table(d.tables.Outbox)+` WHERE status = 'FAILED'
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, `SELECT id FROM `+d.table(d.tables.Outbox)+` WHERE status = 'FAILED' AND id = ANY($1::uuid[])`, 1)

	d.deadLetterListQueries(q)
	// An id already back in the outbox (published again), or whose
	// headers are not a JSON object (the outbox's CHECK would refuse it),
	// stays dead-lettered instead of failing the whole statement.
	//
	// Every statement that changes dead letters by id locks them first in
	// id order (dlLocked): concurrent retries, resolves, deletes and
	// fingerprints of overlapping pages (4 clients retrying one group)
	// then wait for each other in one order and never deadlock. Without
	// it the lock order is the plan's, which changes with the number of
	// ids (an index scan in id order, a bitmap scan in heap order).
	q.dlRetry = d.render(`
	WITH ` + dlLocked + `,
	gone AS (
		DELETE FROM {{dead_letter}} x USING locked l WHERE x.id = l.id
		  AND jsonb_typeof(x.headers) = 'object'
		  AND NOT EXISTS (SELECT 1 FROM {{outbox}} o WHERE o.id = x.id)
		RETURNING x.id, x.event_type, x.event_key, x.payload, x.headers, x.created_at, x.last_error, x.txid, x.route, x.event_id
	),
	ins AS (
		-- The row keeps its producer's txid: back in its key's order where
		-- it was, ahead of the rows its dead letter parked. stream_pos 0
		-- makes it the poller's in WAL mode: the publication leaves it
		-- out, so a retry never comes back through the stream as well.
		-- It keeps its route and event id: a retry resends to the route
		-- that failed, and a route-less dead letter of a fan-out type is
		-- expanded to every route (OutboxExpand).
		INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, created_at, status, attempts, due_at, last_error, txid, stream_pos, route, event_id)
		SELECT id, event_type, event_key, payload, headers, created_at, 'PENDING', 0, now(), last_error, txid, 0, route, event_id FROM gone
		RETURNING event_type
	),
	-- One wake-up per type, delivered on commit, as a notifying publish
	-- sends: a relay that listens claims the retried rows at once, even
	-- when the retry comes from another process (txbox dlq retry).
	woke AS (
		SELECT pg_notify($2, t.event_type) FROM (SELECT DISTINCT event_type FROM ins) t
	)
	SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM woke)`)
	q.dlResolve = d.render(`WITH ` + dlLocked + `
		UPDATE {{dead_letter}} x SET status = 'RESOLVED', resolved_at = now()
		FROM locked l WHERE x.id = l.id AND x.status = 'UNRESOLVED'`)
	q.dlDelete = d.render(`WITH ` + dlLocked + `
		DELETE FROM {{dead_letter}} x USING locked l WHERE x.id = l.id`)
	q.dlCleanup = d.render(cleanupSQL("{{dead_letter}}", "RESOLVED", "resolved_at"))
}

// dlLocked is the CTE "locked": the dead letters among the ids $1, locked
// in id order.
const dlLocked = `locked AS (
		SELECT id FROM {{dead_letter}} WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE
	)`

// deadLetterListQueries are the dead-letter listings, count and preview.
func (d *Driver) deadLetterListQueries(q *queries) {
	// Listings read the payload's size, never the payload: octet_length
	// of a TOASTed value reads its header only, so a page of large dead
	// letters costs what a page of small ones does. The payload itself is
	// read by dlGet alone, one row at a time.
	const dlCols = `id, event_type, COALESCE(event_key, ''), octet_length(payload), headers, attempts, COALESCE(last_error, ''), created_at, failed_at, status, resolved_at, route, event_id`
	const dlFilter = `
		($1 = '' OR event_type = $1)
		AND ($2 = '' OR status = $2)
		AND ($3 = '' OR event_key = $3)
		AND ($4 = '' OR strpos(lower(last_error), lower($4)) > 0)
		AND ($5::timestamptz IS NULL OR failed_at >= $5)
		AND ($6::timestamptz IS NULL OR failed_at < $6)
		AND ($7::uuid[] IS NULL OR id = ANY($7))
		AND ($8 = '' OR fingerprint = $8)
		AND ($9 = '' OR route = $9)`
	const dlPage = `
		AND ($10::timestamptz IS NULL OR (failed_at, id) < ($10, $11::uuid))
		ORDER BY failed_at DESC, id DESC
		LIMIT $12`
	q.dlList = d.render(`SELECT ` + dlCols + ` FROM {{dead_letter}} WHERE ` + dlFilter + dlPage)
	q.dlListIDs = d.render(`SELECT id, failed_at, status FROM {{dead_letter}} WHERE ` + dlFilter + dlPage)
	q.dlCount = d.render(`SELECT count(*) FROM {{dead_letter}} WHERE ` + dlFilter)
	q.dlGet = d.render(`SELECT ` + dlCols + `, payload FROM {{dead_letter}} WHERE id = $1`)

	// Fingerprinting: the rows not fingerprinted yet, locked in id order
	// (a row another caller holds is waited for, and skipped once it has
	// a fingerprint); then their fingerprints in one UPDATE.
	q.dlUnprinted = d.render(`SELECT id, event_type, route, attempts, COALESCE(last_error, '') FROM {{dead_letter}}
		WHERE fingerprint IS NULL ORDER BY id LIMIT $1 FOR UPDATE`)
	q.dlPrint = d.render(`UPDATE {{dead_letter}} x SET fingerprint = u.f, failure_class = u.c, failure_message = u.m, destination = u.d
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(id, f, c, m, d)
		WHERE x.id = u.id AND x.fingerprint IS NULL`)
	// The groups, largest first, counted from dead_letter_group_idx
	// alone; then each group's newest dead letter.
	q.dlGroups = d.render(`SELECT fingerprint, count(*), min(failed_at), max(failed_at) FROM {{dead_letter}}
		WHERE fingerprint IS NOT NULL AND ($1 = '' OR status = $1)
		GROUP BY fingerprint
		HAVING $2::bigint IS NULL OR (count(*), fingerprint) < ($2, $3::text)
		ORDER BY count(*) DESC, fingerprint DESC
		LIMIT $4`)
	q.dlGroupSample = d.render(`SELECT id, event_type, COALESCE(destination, ''), COALESCE(failure_class, ''), COALESCE(failure_message, ''), COALESCE(last_error, '')
		FROM {{dead_letter}} WHERE fingerprint = $1 AND ($2 = '' OR status = $2)
		ORDER BY failed_at DESC, id DESC LIMIT 1`)
}

func (d *Driver) leaseQueries(q *queries) {
	q.leaseAcquire = d.render(`
	INSERT INTO {{lease}} AS l (name, holder, until)
	VALUES ($1, $2, now() + $3::float8 * interval '1 microsecond')
	ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
	WHERE l.until <= now() OR l.holder = EXCLUDED.holder
	RETURNING 1`)
	q.leaseRelease = d.render(`DELETE FROM {{lease}} WHERE name = $1 AND holder = $2`)
}

func (d *Driver) inboxQueries(q *queries) {
	// The table name is validated and quoted by New; the rest is constant.
	const record = `INSERT INTO {{inbox}} (consumer_name, event_id)
		SELECT $1::text, u.id FROM unnest(%s) AS u(id)
		ON CONFLICT DO NOTHING
		RETURNING event_id::text`
	q.inboxRecordNative = d.render(strings.Replace(record, "%s", `$2::uuid[]`, 1))
	q.inboxRecordText = d.render(strings.Replace(record, "%s", `$2::text::uuid[]`, 1))
	q.inboxCleanup = d.render(`DELETE FROM {{inbox}} WHERE (consumer_name, event_id) IN (
		SELECT consumer_name, event_id FROM {{inbox}}
		WHERE processed_at < now() - $1::bigint * interval '1 microsecond'
		LIMIT $2)`)
}

func (d *Driver) schemaQueries(q *queries) {
	sv := d.table(d.tables.SchemaVersion)
	q.migrateLock = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`
	if d.tables.Schema != "" {
		q.createSchema = `CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{d.tables.Schema}.Sanitize()
	}
	q.schemaVersionCreate = `CREATE TABLE IF NOT EXISTS ` + sv + ` (
		version    integer     NOT NULL PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`
	q.schemaVersionMax = `SELECT COALESCE(max(version), 0) FROM ` + sv
	q.schemaVersionInsert = `INSERT INTO ` + sv + ` (version, name) VALUES ($1, $2)`
}

// claimOrdered returns the ordered claim statement for runs of up to run
// rows per key, the lock claim's when lock is set, with the commit
// horizon when horizon is set, rendering each once (a relay uses one per event
// type).
func (d *Driver) claimOrdered(run int, lock, horizon bool) string {
	d.orderedSQLMu.Lock()
	defer d.orderedSQLMu.Unlock()
	k := orderedKey{run, lock, horizon}
	if q, ok := d.orderedSQL[k]; ok {
		return q
	}
	if d.orderedSQL == nil {
		d.orderedSQL = map[orderedKey]string{}
	}
	text, upd := claimOrderedSQL, orderedUpd
	if lock {
		text, upd = lockArgs(claimOrderedSQL), orderedLockUpd
	}
	horizonSQL := "true"
	if horizon {
		horizonSQL = orderHorizon
	}
	// In WAL mode a row the stream owns (ownedSQL) is neither taken nor
	// cut by the horizon: like a head in flight, it holds its key's later
	// rows back until the stream spills it (or confirms and deletes it).
	q := d.render(strings.NewReplacer("{{upd}}", upd, "{{run-1}}", strconv.Itoa(run-1), "{{horizon}}", horizonSQL,
		"{{owned-o}}", d.ownedSQL("o"), "{{owned-e}}", d.ownedSQL("e")).Replace(text))
	d.orderedSQL[k] = q
	return q
}

// orderedKey names one rendering of the ordered claim.
type orderedKey struct {
	run           int
	lock, horizon bool
}

// orderHorizon is the commit horizon of the ordered claim
// (docs/concepts.md, "Ordering"): a row may be taken only when the
// transaction that inserted it is older than every transaction still in
// progress, so no transaction that could yet commit an earlier row of its
// key, in (txid, id) order, is left. The horizon CTE reads the statement's
// snapshot once.
const orderHorizon = `e.txid < (SELECT xmin FROM horizon)`

// orderedUpd is the last step of the ordered lease claim: the kept rows
// become IN_PROCESS under the lease.
const orderedUpd = `upd AS (
		UPDATE {{outbox}} AS u
		SET status = 'IN_PROCESS', lease_until = now() + $3::float8 * interval '1 microsecond', lease_token = $4
		FROM keep
		WHERE u.ctid = keep.tid
		RETURNING u.id, u.event_type, COALESCE(u.event_key, '') AS event_key, u.payload, u.headers, u.attempts, u.created_at, u.due_at, u.txid, u.route, u.event_id
	)`

// orderedLockUpd is the last step of the ordered lock claim (lock.go):
// the kept rows are only read; the statement's FOR UPDATE holds them.
const orderedLockUpd = `upd AS (
		SELECT u.id, u.event_type, COALESCE(u.event_key, '') AS event_key, u.payload, u.headers, u.attempts, u.created_at, u.due_at, u.txid, u.route, u.event_id
		FROM {{outbox}} u JOIN keep ON u.ctid = keep.tid
	)`

// claimOrderedSQL is the ordered-by-key claim (docs/schema/postgres.md, "Ordered
// claim"). It reads O(batch) index entries however many rows wait behind
// one key, instead of walking the claim index in due order past every
// row of a blocked key. It takes rows of one fan-out route $10 ("" for a
// type without routes; docs/schema/postgres.md, "Fan-out routes"): the
// walk is over the route's range of the key index, and for a route other
// than "" a key's earliest route-"" row (an event not expanded yet, which
// will have a row on this route in the same place of the key's order)
// ends the run before it (un, hd), and a dead letter of route "" parks
// the key as well as one of the route:
//
//   - keyless: a window of the type's oldest due PENDING rows after the
//     keyless sweep cursor ($8, $9), LIMIT $2. Rows without a key are
//     unordered; the window finds them without an index of their own, and
//     the sweep (moved by the driver, see orderedCursor) keeps a window
//     filled with blocked keyed rows from hiding the keyless rows behind it.
//   - walk: a loose index scan over route_key_idx (event_type, route,
//     event_key, txid, id), which holds only PENDING, IN_PROCESS and FAILED rows; a
//     key's order is (txid, id), its producers' transaction order, and a
//     row is below the commit horizon ({{horizon}}, orderHorizon) only when
//     its txid is below the statement snapshot's xmin. Each step jumps
//     to the first entry of the next key after the previous one (starting
//     after the key cursor $5 and wrapping around once, so every key gets
//     its turn): that key's head. The run is the head and, when the head is
//     PENDING and due, the next $6 - 1 entries after it in the index, kept
//     while they are of the same key: a row comparison range with a
//     constant LIMIT ({{run-1}} in the text) and the type and key checked
//     outside it. An equality on the key would let the planner, whose
//     estimate of one key's rows is poor, prefer a bitmap scan that reads
//     every row of the key; an equality on the type would make the scan
//     start at the type's first entry instead of at the row comparison. The
//     run is the longest prefix whose rows are all PENDING, due and past
//     the horizon; a head IN_PROCESS or FAILED, not due yet, or held by the
//     horizon yields nothing, and an unresolved dead letter of the key parks
//     it. A run that ends at a row the horizon held counts as cut. The walk
//     stops when it has $2 rows in all or after $7 keys.
//   - locked: the candidates, re-checked and locked FOR UPDATE SKIP
//     LOCKED, found by ctid (a TID scan, one page each, where a primary key
//     probe reads four; a row updated since the walk read it has a new ctid
//     and is left out, like one another claimer holds) and updated by ctid. A key keeps only the prefix of its run that this statement
//     locked: a row another claimer holds ends the run there, so two
//     relays never hold rows of one key that are not contiguous.
//
// The last row of the result is a marker (first column true) carrying the
// cursor positions: the last key walked, the keyless window's size and
// last (due_at, id), and the number of keys the horizon cut.
const claimOrderedSQL = `
	WITH RECURSIVE
	horizon AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
	keyless AS MATERIALIZED (
		SELECT o.id, o.ctid AS tid, o.event_key, o.due_at FROM {{outbox}} o
		WHERE o.status = 'PENDING' AND o.event_type = $1 AND o.route = $10 AND o.due_at <= now()
		  AND (o.due_at, o.id) > ($8::timestamptz, $9::uuid){{owned-o}}
		ORDER BY o.due_at, o.id
		LIMIT $2
	),
	walk(key, wrapped, ids, tids, total, steps, cut) AS (
		SELECT $5::text, false, '{}'::uuid[], '{}'::tid[], (SELECT count(*)::int FROM keyless WHERE event_key IS NULL), 0, false
	  UNION ALL
		SELECT nk.key, nk.wrapped, run.ids, run.tids, w.total + cardinality(run.ids), w.steps + 1, run.cut
		FROM walk w
		LEFT JOIN LATERAL (
			SELECT e.event_key AS key, e.txid, e.id, e.ctid AS tid,
				e.status = 'PENDING' AND e.due_at <= now() AND {{horizon}}{{owned-e}} AS ok,
				e.status = 'PENDING' AND e.due_at <= now() AND NOT {{horizon}}{{owned-e}} AS cut
			FROM {{outbox}} e
			WHERE e.event_type = $1 AND e.route = $10 AND e.event_key > w.key
			  AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED')
			ORDER BY e.event_key, e.txid, e.id LIMIT 1) a ON true
		LEFT JOIN LATERAL (
			SELECT e.event_key AS key, e.txid, e.id, e.ctid AS tid,
				e.status = 'PENDING' AND e.due_at <= now() AND {{horizon}}{{owned-e}} AS ok,
				e.status = 'PENDING' AND e.due_at <= now() AND NOT {{horizon}}{{owned-e}} AS cut
			FROM {{outbox}} e
			WHERE a.key IS NULL AND NOT w.wrapped AND e.event_type = $1 AND e.route = $10
			  AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED')
			ORDER BY e.event_key, e.txid, e.id LIMIT 1) f ON true
		CROSS JOIN LATERAL (SELECT COALESCE(a.key, f.key) AS key, COALESCE(a.txid, f.txid) AS txid,
			COALESCE(a.id, f.id) AS head, COALESCE(a.tid, f.tid) AS tid, COALESCE(a.ok, f.ok) AS ok,
			COALESCE(a.cut, f.cut) AS cut, w.wrapped OR a.key IS NULL AS wrapped OFFSET 0) nk
		LEFT JOIN LATERAL (
			SELECT u.txid, u.id FROM (
				SELECT e.event_type, e.route, e.event_key, e.txid, e.id FROM {{outbox}} e
				WHERE $10::text <> '' AND (e.event_type, e.route, e.event_key) >= ($1, '', nk.key)
				  AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED')
				ORDER BY e.event_type, e.route, e.event_key, e.txid, e.id
				LIMIT 1) u
			WHERE u.event_type = $1 AND u.route = '' AND u.event_key = nk.key) un ON true
		CROSS JOIN LATERAL (SELECT nk.ok AND (un.id IS NULL OR (nk.txid, nk.head) < (un.txid, un.id)) AS ok OFFSET 0) hd
		CROSS JOIN LATERAL (SELECT COALESCE(array_agg(c.id ORDER BY c.rn) FILTER (WHERE c.ok), '{}') AS ids,
			COALESCE(array_agg(c.tid ORDER BY c.rn) FILTER (WHERE c.ok), '{}') AS tids,
			COALESCE(bool_or(c.cut AND c.first_not_ok), false) AS cut FROM (
				SELECT i.id, i.tid, i.cut,
					bool_and(i.ok) OVER (ORDER BY i.txid, i.id ROWS UNBOUNDED PRECEDING) AS ok,
					NOT i.ok AND bool_and(i.ok) OVER (ORDER BY i.txid, i.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) IS NOT FALSE AS first_not_ok,
					row_number() OVER (ORDER BY i.txid, i.id ROWS UNBOUNDED PRECEDING) AS rn
				FROM (
					SELECT nk.txid, nk.head AS id, nk.tid, hd.ok, nk.cut
				  UNION ALL
					SELECT r.txid, r.id, r.tid, r.ok AND (un.id IS NULL OR (r.txid, r.id) < (un.txid, un.id)), r.cut FROM (
						SELECT e.event_type, e.route, e.event_key, e.txid, e.id, e.ctid AS tid,
							e.status = 'PENDING' AND e.due_at <= now() AND {{horizon}}{{owned-e}} AS ok,
							e.status = 'PENDING' AND e.due_at <= now() AND NOT {{horizon}}{{owned-e}} AS cut
						FROM {{outbox}} e
						WHERE hd.ok AND (e.event_type, e.route, e.event_key, e.txid, e.id) > ($1, $10, nk.key, nk.txid, nk.head)
						  AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED')
						ORDER BY e.event_type, e.route, e.event_key, e.txid, e.id
						LIMIT {{run-1}}) r
					WHERE r.event_type = $1 AND r.route = $10 AND r.event_key = nk.key) i) c
			WHERE c.rn <= LEAST($6::int, $2::int - w.total) AND NOT EXISTS (
				SELECT 1 FROM {{dead_letter}} x
				WHERE x.event_type = $1 AND x.event_key = nk.key AND x.route IN ($10, '')
				  AND x.event_key IS NOT NULL AND x.status = 'UNRESOLVED')
			OFFSET 0) run
		WHERE w.total < $2 AND w.steps < $7 AND nk.key IS NOT NULL
		  AND NOT (nk.wrapped AND $5::text IS NOT NULL AND nk.key > $5::text)
	),
	runs AS MATERIALIZED (
		SELECT w.key, r.id, r.tid, r.ord FROM walk w, unnest(w.ids, w.tids) WITH ORDINALITY AS r(id, tid, ord)
	),
	locked AS MATERIALIZED (
		SELECT o.id, o.ctid AS tid FROM {{outbox}} o
		WHERE o.ctid = ANY (ARRAY(SELECT tid FROM runs UNION ALL SELECT tid FROM keyless WHERE event_key IS NULL))
		  AND o.status = 'PENDING' AND o.due_at <= now()
		FOR UPDATE SKIP LOCKED
	),
	keep AS (
		SELECT l.tid FROM locked l
		WHERE EXISTS (SELECT 1 FROM keyless k WHERE k.id = l.id AND k.event_key IS NULL)
		   OR EXISTS (
			SELECT 1 FROM runs r
			WHERE r.id = l.id AND NOT EXISTS (
				SELECT 1 FROM runs p
				WHERE p.key = r.key AND p.ord <= r.ord
				  AND NOT EXISTS (SELECT 1 FROM locked m WHERE m.id = p.id)))
	),
{{upd}}
	SELECT false, id, event_type, event_key, payload, headers, attempts, created_at, due_at, txid::text::bigint, route, event_id FROM upd
	UNION ALL
	SELECT true,
		(SELECT id FROM keyless ORDER BY due_at DESC, id DESC LIMIT 1), '',
		(SELECT key FROM walk ORDER BY steps DESC LIMIT 1), ''::bytea, '{}'::jsonb,
		(SELECT count(*)::int FROM keyless), now(),
		(SELECT max(due_at) FROM keyless),
		(SELECT count(*)::int FROM walk WHERE cut), '', NULL::uuid`
