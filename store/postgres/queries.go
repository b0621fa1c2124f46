package postgres

import "strings"

// queries holds every statement of the driver, rendered once in New with
// the validated, quoted table names. Their text never changes afterwards,
// so pgx's statement cache prepares each one once per connection.
type queries struct {
	insertNative, insertNativeNotify string
	insertText, insertTextNotify     string
	insertOne, insertOneNotify       string
	notify                           string

	claim, claimOrdered string
	finish              string
	recover             string
	pendingTypes        string
	stats               string
	cleanup             string

	dlMove, dlList, dlCount, dlGet string
	dlRetry, dlResolve, dlDelete   string
	dlCleanup                      string

	leaseAcquire, leaseRelease string
}

// render replaces {{outbox}}, {{dead_letter}} and {{lease}} in s.
func (d *Driver) render(s string) string {
	return strings.NewReplacer(
		"{{outbox}}", d.table(d.tables.Outbox),
		"{{dead_letter}}", d.table(d.tables.DeadLetter),
		"{{lease}}", d.table(d.tables.Lease),
		"{{inbox}}", d.table(d.tables.Inbox),
	).Replace(s)
}

// The insert reads one array per column. not_before is NULL or a time;
// GREATEST ignores NULL, so due_at is now() or the later not-before.
const insertBody = `
	INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, due_at)
	SELECT u.id, u.event_type, NULLIF(u.event_key, ''), u.payload, u.headers::jsonb, GREATEST(now(), u.not_before)
	FROM unnest(%s) AS u(id, event_type, event_key, payload, headers, not_before)`

const insertNativeArgs = `$1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::timestamptz[]`

// database/sql drivers bind every array as one text parameter.
const insertTextArgs = `$1::text::uuid[], $2::text::text[], $3::text::text[], $4::text::bytea[], $5::text::text[], $6::text::timestamptz[]`

// The notifying variant wraps the insert in a CTE and sends one
// notification per distinct event type; PostgreSQL delivers them only when
// the caller's transaction commits, and folds duplicates within it.
func insertSQL(args string, notify bool) string {
	body := strings.Replace(insertBody, "%s", args, 1)
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

func buildQueries(d *Driver) queries {
	var q queries
	q.notify = `SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t`
	q.insertOne = d.render(insertOneBody)
	q.insertOneNotify = d.render(`WITH ins AS (` + insertOneBody + `
	RETURNING event_type)
	SELECT pg_notify($7, event_type) FROM ins`)
	q.insertNative = d.render(insertSQL(insertNativeArgs, false))
	q.insertNativeNotify = d.render(insertSQL(insertNativeArgs, true))
	q.insertText = d.render(insertSQL(insertTextArgs, false))
	q.insertTextNotify = d.render(insertSQL(insertTextArgs, true))

	const claimTmpl = `
	WITH picked AS (
		SELECT o.id FROM {{outbox}} o
		WHERE o.status = 'PENDING' AND o.event_type = $1 AND o.due_at <= now()
		  AND (o.due_at, o.id) > (
			LEAST($5::timestamptz, now() - $7::float8 * interval '1 microsecond'),
			CASE WHEN $5::timestamptz < now() - $7::float8 * interval '1 microsecond'
			     THEN $6::uuid ELSE '00000000-0000-0000-0000-000000000000'::uuid END) %s
		ORDER BY o.due_at, o.id
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	UPDATE {{outbox}} AS u
	SET status = 'IN_PROCESS', lease_until = now() + $3::float8 * interval '1 microsecond', lease_token = $4
	FROM picked
	WHERE u.id = picked.id
	RETURNING u.id, u.event_type, COALESCE(u.event_key, ''), u.payload, u.headers, u.attempts, u.created_at, u.due_at`
	q.claim = d.render(strings.Replace(claimTmpl, "%s", "", 1))
	// Ordered by key: only the head of each key is claimable. The head is
	// the row with no earlier unfinished row of the same type and key, and
	// no unresolved dead letter of that type and key (a parked key).
	q.claimOrdered = d.render(strings.Replace(claimTmpl, "%s", `
		AND (o.event_key IS NULL OR (
			NOT EXISTS (
				SELECT 1 FROM {{outbox}} e
				WHERE e.event_type = o.event_type AND e.event_key = o.event_key AND e.id < o.id
				  AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED'))
			AND NOT EXISTS (
				SELECT 1 FROM {{dead_letter}} x
				WHERE x.event_type = o.event_type AND x.event_key = o.event_key
				  AND x.event_key IS NOT NULL AND x.status = 'UNRESOLVED')))`, 1))

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

	q.cleanup = d.render(`
	DELETE FROM {{outbox}} WHERE id IN (
		SELECT id FROM {{outbox}}
		WHERE status = 'PROCESSED' AND processed_at < now() - $1::float8 * interval '1 microsecond'
		ORDER BY processed_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED)`)

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
		RETURNING o.id, o.event_type, o.event_key, o.payload, o.headers, o.attempts, o.last_error, o.created_at, o.processed_at
	),
	ins AS (
		INSERT INTO {{dead_letter}} AS x (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at)
		SELECT id, event_type, event_key, payload, headers, attempts, last_error, created_at, COALESCE(processed_at, now()) FROM gone
		ON CONFLICT (id) DO UPDATE SET
			event_type = EXCLUDED.event_type, event_key = EXCLUDED.event_key, payload = EXCLUDED.payload,
			headers = EXCLUDED.headers, attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
			created_at = EXCLUDED.created_at, failed_at = EXCLUDED.failed_at, status = 'UNRESOLVED', resolved_at = NULL
		RETURNING 1
	)
	SELECT count(*) FROM ins`)

	const dlCols = `id, event_type, COALESCE(event_key, ''), payload, headers, attempts, COALESCE(last_error, ''), created_at, failed_at, status, resolved_at`
	const dlFilter = `
		($1 = '' OR event_type = $1)
		AND ($2 = '' OR status = $2)
		AND ($3 = '' OR event_key = $3)
		AND ($4 = '' OR strpos(last_error, $4) > 0)
		AND ($5::timestamptz IS NULL OR failed_at >= $5)
		AND ($6::timestamptz IS NULL OR failed_at < $6)`
	q.dlList = d.render(`SELECT ` + dlCols + ` FROM {{dead_letter}} WHERE ` + dlFilter + `
		AND ($7::timestamptz IS NULL OR (failed_at, id) < ($7, $8::uuid))
		ORDER BY failed_at DESC, id DESC
		LIMIT $9`)
	q.dlCount = d.render(`SELECT count(*) FROM {{dead_letter}} WHERE ` + dlFilter)
	q.dlGet = d.render(`SELECT ` + dlCols + ` FROM {{dead_letter}} WHERE id = $1`)
	// An id already back in the outbox (published again), or whose
	// headers are not a JSON object (the outbox's CHECK would refuse it),
	// stays dead-lettered instead of failing the whole statement.
	q.dlRetry = d.render(`
	WITH gone AS (
		DELETE FROM {{dead_letter}} x WHERE x.id = ANY($1::uuid[])
		  AND jsonb_typeof(x.headers) = 'object'
		  AND NOT EXISTS (SELECT 1 FROM {{outbox}} o WHERE o.id = x.id)
		RETURNING x.id, x.event_type, x.event_key, x.payload, x.headers, x.created_at, x.last_error
	),
	ins AS (
		INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, created_at, status, attempts, due_at, last_error)
		SELECT id, event_type, event_key, payload, headers, created_at, 'PENDING', 0, now(), last_error FROM gone
		RETURNING 1
	)
	SELECT count(*) FROM ins`)
	q.dlResolve = d.render(`UPDATE {{dead_letter}} SET status = 'RESOLVED', resolved_at = now()
		WHERE id = ANY($1::uuid[]) AND status = 'UNRESOLVED'`)
	q.dlDelete = d.render(`DELETE FROM {{dead_letter}} WHERE id = ANY($1::uuid[])`)
	q.dlCleanup = d.render(`
	DELETE FROM {{dead_letter}} WHERE id IN (
		SELECT id FROM {{dead_letter}}
		WHERE status = 'RESOLVED' AND resolved_at < now() - $1::float8 * interval '1 microsecond'
		ORDER BY resolved_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED)`)

	q.leaseAcquire = d.render(`
	INSERT INTO {{lease}} AS l (name, holder, until)
	VALUES ($1, $2, now() + $3::float8 * interval '1 microsecond')
	ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
	WHERE l.until <= now() OR l.holder = EXCLUDED.holder
	RETURNING 1`)
	q.leaseRelease = d.render(`DELETE FROM {{lease}} WHERE name = $1 AND holder = $2`)
	return q
}
