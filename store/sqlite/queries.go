package sqlite

import (
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// All SQL of the package lives here, written against placeholder table
// names ({outbox}, {dead_letter}, ...) that buildQueries replaces with the
// validated, double-quoted names once per Driver.

// nowSQL is the database clock in the schema's timestamp format.
const nowSQL = `strftime('%Y-%m-%d %H:%M:%f', 'now')`

// nowPlusSQL is the database clock moved by a bound modifier such as
// '+1.500 seconds' (see modifier).
const nowPlusSQL = `strftime('%Y-%m-%d %H:%M:%f', 'now', ?)`

// timeLayout is the Go layout of the schema's timestamps.
const timeLayout = "2006-01-02 15:04:05.000"

// modifier renders d as an SQLite date modifier, millisecond precision.
func modifier(d time.Duration) string {
	return fmt.Sprintf("%+.3f seconds", d.Seconds())
}

// formatTime renders t in the schema's timestamp format, UTC.
func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// parseTime reads a timestamp column. Plain-SQL producers may write
// CURRENT_TIMESTAMP ('YYYY-MM-DD HH:MM:SS') or an ISO 8601 form with a T;
// all are UTC.
func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{timeLayout, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("sqlite: unreadable timestamp %q", s)
}

// queries holds every statement with the table names filled in.
type queries struct {
	// Failure groups (groups.go).
	groups sqlstore.GroupSQL
	// Operators' views and relay heartbeats (inspect.go).
	inspectGroups, inspectLastError, parkedKeys                string
	instanceForget, instanceBeat, instanceList, instanceRemove string

	// lockGrab is a write that changes nothing: as the first statement of
	// a deferred transaction it takes the write lock (see Driver.begin).
	lockGrab string

	schemaVersionCreate string
	schemaVersionMax    string
	schemaVersionInsert string

	insertPrefix      string // INSERT INTO outbox (...) VALUES
	insertRow         string // one row's value tuple, insertParams parameters
	insertPrefixNoDue string // the same without due_at, which then defaults to now
	insertRowNoDue    string // insertParams-1 parameters
	insertOne         string // insertPrefix + insertRow
	insertOneNoDue    string // insertPrefixNoDue + insertRowNoDue

	claim string
	// The ordered claim (ordered.go): the keyless window, one key's head
	// and run, and the update of the chosen ids.
	orderedWindow string
	orderedKey    string
	claimIDs      string
	finishAck     string // ids as a JSON array
	finishDelete  string // ids as a JSON array
	finishRetry   string
	finishFailed  string
	finishReleas  string
	recover       string
	pendingTypes  string
	stats         string
	cleanup       string

	deadLetterMove       string
	deadLetterMoveDelete string // + id list
	deadLetterSelect     string // columns of a dead letter but its payload, FROM included
	deadLetterSelectIDs  string // id, failed_at, status, FROM included
	deadLetterGet        string // the columns and the payload of one id
	deadLetterCount      string
	deadLetterRetry      string // + id list + conflict clause
	deadLetterRetryDel   string // + id list
	deadLetterResolve    string // + id list
	deadLetterDelete     string // + id list
	deadLetterCleanup    string

	audit auditQueries

	// Fan-out (fanout.go).
	fanout fanoutQueries

	leaseAcquire string
	leaseRelease string

	inboxRecord  string // consumer, ids as a JSON array
	inboxCleanup string

	schemaVersionExists string
}

// readableRow is true for a row whose headers, id and created_at the
// outbox triggers of schema version 2 (migrations/0002_checks.sql) accept.
const readableRow = `CASE WHEN json_valid(headers) THEN json_type(headers) END = 'object'` +
	` AND id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'` +
	` AND created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]*'`

// insertParams is the number of bound parameters per inserted row.
const insertParams = 6

// maxInsertRows bounds one INSERT statement: 6 × 500 = 3,000 parameters,
// far below SQLite's limit of 32,766 and small enough that the statement
// text stays a few tens of KiB.
const maxInsertRows = 500

// maxListIDs bounds the ids bound in one IN (...) list.
const maxListIDs = 1000

func quote(name string) string { return `"` + name + `"` }

// buildQueries renders every statement for t, area by area.
func buildQueries(t store.Tables) queries {
	r := strings.NewReplacer(
		"{outbox}", quote(t.Outbox),
		"{dead_letter}", quote(t.DeadLetter),
		"{inbox}", quote(t.Inbox),
		"{lease}", quote(t.Lease),
		"{schema_version}", quote(t.SchemaVersion),
		"{instance}", quote(t.Instance),
		"{now}", nowSQL,
		"{now+}", nowPlusSQL,
	)
	var q queries
	publishQueries(&q, r)
	groupQueries(&q, r)
	claimQueries(&q, r)
	finishQueries(&q, r)
	statsQueries(&q, r)
	deadLetterQueries(&q, r)
	inspectQueries(&q, r)
	leaseQueries(&q, r)
	inboxQueries(&q, r)
	schemaQueries(&q, r)
	auditSQL(&q, t.Audit)
	q.fanout = buildFanoutQueries(r)
	q.insertOne = q.insertPrefix + q.insertRow
	q.insertOneNoDue = q.insertPrefixNoDue + q.insertRowNoDue
	return q
}

// publishQueries: a prefix and one row tuple per event, with
// and without a due time.
func publishQueries(q *queries, r *strings.Replacer) {
	q.insertPrefix = r.Replace(`INSERT INTO {outbox} (id, event_type, event_key, payload, headers, due_at) VALUES `)
	q.insertRow = r.Replace(`(?, ?, ?, ?, ?, coalesce(max(?, {now}), {now}))`)
	// Most events have no NotBefore: the simpler statement compiles
	// and runs measurably faster (see docs/benchmarks/sqlite.md).
	q.insertPrefixNoDue = r.Replace(`INSERT INTO {outbox} (id, event_type, event_key, payload, headers) VALUES `)
	q.insertRowNoDue = `(?, ?, ?, ?, ?)`
}

// claimedColumns are the columns a claim returns (claimRun.run).
const claimedColumns = `id, event_type, event_key, payload, headers, attempts, created_at, due_at, rowid, route, event_id`

// claimQueries: the claim, the ordered claim (ordered.go) and the recovery
// of expired leases.
func claimQueries(q *queries, r *strings.Replacer) {
	const claimBase = `UPDATE {outbox} SET status = 'IN_PROCESS', lease_until = {now+}, lease_token = ?
WHERE id IN (
    SELECT id FROM {outbox} AS o
    WHERE o.status = 'PENDING' AND o.event_type = ? AND o.route = ? AND o.due_at <= {now}%s
    ORDER BY o.due_at, o.id
    LIMIT ?)
RETURNING ` + claimedColumns
	q.claim = r.Replace(fmt.Sprintf(claimBase, ""))
	// The type's oldest due PENDING rows after the keyless sweep's
	// (due_at, id), through the claim index.
	q.orderedWindow = r.Replace(`SELECT id, due_at, coalesce(event_key, '') FROM {outbox}
WHERE status = 'PENDING' AND event_type = ?1 AND route = ?5 AND due_at <= {now} AND (due_at, id) > (?2, ?3)
ORDER BY due_at, id
LIMIT ?4`)
	// The first key after ?2 in the key index, and its first ?3
	// entries in rowid order, the writers' order (migration 4): each is
	// claimable while PENDING and due;
	// parked when an unresolved dead letter has the key. The empty
	// key is no key (unordered), so walks start after ''. The rows are
	// the route's (?4); the park check takes the dead letters of the
	// route and of route ''. For a route other than '', a row of the key
	// with route '' not done (an event not expanded yet, PENDING ones
	// included) holds the key wherever its rowid is: the further routes'
	// rows of an event are inserted at the end when it is expanded, so
	// its rowid says nothing of their place (docs/schema/sqlite.md).
	q.orderedKey = r.Replace(`SELECT o.event_key, o.id, o.status = 'PENDING' AND o.due_at <= {now},
    EXISTS (SELECT 1 FROM {dead_letter} AS x
            WHERE x.event_type = ?1 AND x.event_key = o.event_key AND x.status = 'UNRESOLVED' AND x.route IN (?4, ''))
    OR (?4 <> '' AND EXISTS (SELECT 1 FROM {outbox} AS u
            WHERE u.event_type = ?1 AND u.route = '' AND u.event_key = o.event_key AND u.status IN ('PENDING', 'IN_PROCESS', 'FAILED')))
FROM {outbox} AS o
WHERE o.event_type = ?1 AND o.route = ?4 AND o.status IN ('PENDING', 'IN_PROCESS', 'FAILED')
  AND o.event_key = (
    SELECT min(event_key) FROM {outbox}
    WHERE event_type = ?1 AND route = ?4 AND event_key > ?2 AND status IN ('PENDING', 'IN_PROCESS', 'FAILED'))
ORDER BY o.rowid
LIMIT ?3`)
	q.claimIDs = r.Replace(`UPDATE {outbox} SET status = 'IN_PROCESS', lease_until = {now+}, lease_token = ?
WHERE status = 'PENDING' AND id IN (SELECT value FROM json_each(?))
RETURNING ` + claimedColumns)
	q.recover = r.Replace(`UPDATE {outbox}
SET status = 'PENDING', due_at = {now}, lease_until = NULL, lease_token = NULL
WHERE id IN (
    SELECT id FROM {outbox}
    WHERE status = 'IN_PROCESS' AND lease_until < {now}
    ORDER BY lease_until
    LIMIT ?)`)
}

// finishQueries: the fenced finish and the cleanup of processed rows.
func finishQueries(q *queries, r *strings.Replacer) {
	q.finishAck = r.Replace(`UPDATE {outbox}
SET status = 'PROCESSED', processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE lease_token = ? AND status = 'IN_PROCESS' AND id IN (SELECT value FROM json_each(?))`)
	q.finishDelete = r.Replace(`DELETE FROM {outbox}
WHERE lease_token = ? AND status = 'IN_PROCESS' AND id IN (SELECT value FROM json_each(?))`)
	q.finishRetry = r.Replace(`UPDATE {outbox}
SET status = 'PENDING', attempts = attempts + 1, due_at = {now+}, last_error = ?, lease_until = NULL, lease_token = NULL
WHERE id = ? AND lease_token = ? AND status = 'IN_PROCESS'`)
	// processed_at of a FAILED row is when it failed: the dead-letter
	// mover copies it into failed_at.
	q.finishFailed = r.Replace(`UPDATE {outbox}
SET status = 'FAILED', attempts = attempts + 1, last_error = ?, processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE id = ? AND lease_token = ? AND status = 'IN_PROCESS'`)
	q.finishReleas = r.Replace(`UPDATE {outbox}
SET status = 'PENDING', due_at = {now+}, lease_until = NULL, lease_token = NULL
WHERE id = ? AND lease_token = ? AND status = 'IN_PROCESS'`)
	q.cleanup = r.Replace(cleanupSQL("{outbox}", "PROCESSED", "processed_at"))
}

// cleanupSQL deletes the ? oldest rows of table in status whose time
// column is older than {now+}, oldest first. The outbox and the dead
// letters share it.
func cleanupSQL(table, status, column string) string {
	return `DELETE FROM ` + table + `
WHERE id IN (
    SELECT id FROM ` + table + `
    WHERE status = '` + status + `' AND ` + column + ` < {now+}
    ORDER BY ` + column + `
    LIMIT ?)`
}

// statsQueries: pending-types discovery and per-type stats.
func statsQueries(q *queries, r *strings.Replacer) {
	// A loose index scan over the claim index: one index seek per
	// distinct type instead of reading every pending row.
	q.pendingTypes = r.Replace(`WITH RECURSIVE t(event_type) AS (
    SELECT (SELECT min(event_type) FROM {outbox} WHERE status = 'PENDING')
    UNION ALL
    SELECT (SELECT min(o.event_type) FROM {outbox} AS o WHERE o.status = 'PENDING' AND o.event_type > t.event_type)
    FROM t WHERE t.event_type IS NOT NULL)
SELECT event_type FROM t WHERE event_type IS NOT NULL`)
	// One branch per status, each read through that status's partial
	// index, so PROCESSED rows kept for retention are never scanned.
	q.stats = r.Replace(`SELECT event_type, sum(p), sum(ip), sum(f),
    coalesce(CAST(round((julianday('now') - julianday(min(oldest))) * 86400000.0) AS INTEGER), 0)
FROM (
    SELECT event_type, count(*) AS p, 0 AS ip, 0 AS f, min(created_at) AS oldest
    FROM {outbox} WHERE status = 'PENDING' GROUP BY event_type
    UNION ALL
    SELECT event_type, 0, count(*), 0, NULL FROM {outbox} WHERE status = 'IN_PROCESS' GROUP BY event_type
    UNION ALL
    SELECT event_type, 0, 0, count(*), NULL FROM {outbox} WHERE status = 'FAILED' GROUP BY event_type)
GROUP BY event_type
ORDER BY event_type`)
}

// deadLetterQueries: the dead-letter table. Statements that end in "IN "
// take an id list (placeholders).
func deadLetterQueries(q *queries, r *strings.Replacer) {
	// Listings read the payload's size, not the payload: length() of a
	// BLOB column reads the record header only. A TEXT payload (written by
	// plain SQL) is measured in bytes, not characters. DeadLetterGet alone
	// reads the payload, after these columns.
	const dlCols = `id, event_type, event_key, iif(typeof(payload) = 'blob', length(payload), length(CAST(payload AS BLOB))), headers, attempts, last_error, created_at, failed_at, status, resolved_at, route, coalesce(event_id, '')`
	// WHERE true: SQLite's parser needs it between INSERT ... SELECT
	// and an upsert clause. failed_at is when the row failed (its
	// processed_at, set by finishFailed); rows failed before that was
	// recorded get the move time.
	q.deadLetterMove = r.Replace(`INSERT INTO {dead_letter} (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at, status, seq, route, event_id)
SELECT id, event_type, event_key, payload, headers, attempts, last_error, created_at, coalesce(processed_at, {now}), 'UNRESOLVED', rowid, route, event_id
FROM {outbox} WHERE status = 'FAILED' AND true
ORDER BY id
LIMIT ?
ON CONFLICT (id) DO UPDATE SET
    event_type = excluded.event_type, event_key = excluded.event_key, payload = excluded.payload,
    headers = excluded.headers, attempts = excluded.attempts, last_error = excluded.last_error,
    created_at = excluded.created_at, failed_at = excluded.failed_at, status = 'UNRESOLVED', resolved_at = NULL,
    seq = excluded.seq, route = excluded.route, event_id = excluded.event_id,
    fingerprint = NULL, failure_class = NULL, failure_message = NULL, destination = NULL
RETURNING id`)
	q.deadLetterMoveDelete = r.Replace(`DELETE FROM {outbox} WHERE status = 'FAILED' AND id IN `)
	q.deadLetterSelect = r.Replace(`SELECT ` + dlCols + ` FROM {dead_letter}`)
	q.deadLetterSelectIDs = r.Replace(`SELECT id, failed_at, status FROM {dead_letter}`)
	q.deadLetterGet = r.Replace(`SELECT ` + dlCols + `, payload FROM {dead_letter} WHERE id = ?`)
	q.deadLetterCount = r.Replace(`SELECT count(*) FROM {dead_letter}`)
	// The row gets its old rowid back, its place in its key's order,
	// when the rowid is below the table's largest (so no rowid the
	// statement assigns can take it), free, and no other dead letter had
	// it too (SQLite reuses the rowid of a deleted last row); otherwise a
	// new one (NULL), at the end of its key.
	q.deadLetterRetry = r.Replace(`INSERT INTO {outbox} (rowid, id, event_type, event_key, payload, headers, status, attempts, due_at, last_error, created_at, route, event_id)
SELECT CASE WHEN x.seq < (SELECT max(rowid) FROM {outbox})
        AND NOT EXISTS (SELECT 1 FROM {outbox} AS o WHERE o.rowid = x.seq)
        AND NOT EXISTS (SELECT 1 FROM {dead_letter} AS y WHERE y.seq = x.seq AND y.id <> x.id) THEN x.seq END,
    id, event_type, event_key, payload, headers, 'PENDING', 0, {now}, last_error, created_at, route, event_id
FROM {dead_letter} AS x WHERE id IN `)
	q.deadLetterRetryDel = r.Replace(`DELETE FROM {dead_letter} WHERE id IN `)
	q.deadLetterResolve = r.Replace(`UPDATE {dead_letter} SET status = 'RESOLVED', resolved_at = {now}
WHERE status = 'UNRESOLVED' AND id IN `)
	q.deadLetterDelete = r.Replace(`DELETE FROM {dead_letter} WHERE id IN `)
	q.deadLetterCleanup = r.Replace(cleanupSQL("{dead_letter}", "RESOLVED", "resolved_at"))
}

// leaseQueries: the lease table, for leases and for the write-lock grab of
// Driver.begin.
func leaseQueries(q *queries, r *strings.Replacer) {
	q.leaseAcquire = r.Replace(`INSERT INTO {lease} (name, holder, lease_until) VALUES (?, ?, {now+})
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, lease_until = excluded.lease_until
WHERE {lease}.lease_until < {now} OR {lease}.holder = excluded.holder`)
	q.leaseRelease = r.Replace(`DELETE FROM {lease} WHERE name = ? AND holder = ?`)
	q.lockGrab = r.Replace(`UPDATE {lease} SET name = name WHERE 0`)
}

// schemaQueries: the schema version table of Migrate.
func schemaQueries(q *queries, r *strings.Replacer) {
	q.schemaVersionCreate = r.Replace(`CREATE TABLE IF NOT EXISTS {schema_version} (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL DEFAULT '',
    applied_at TEXT    NOT NULL DEFAULT ({now}))`)
	q.schemaVersionMax = r.Replace(`SELECT coalesce(max(version), 0) FROM {schema_version}`)
	q.schemaVersionInsert = r.Replace(`INSERT INTO {schema_version} (version, name) VALUES (?, ?)`)
	q.schemaVersionExists = `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`
}

// inboxQueries: the inbox (store.Inbox). ORDER BY keeps a deterministic
// insert order; DISTINCT drops repeated ids before they reach the insert.
func inboxQueries(q *queries, r *strings.Replacer) {
	q.inboxRecord = r.Replace(`INSERT OR IGNORE INTO {inbox} (consumer_name, event_id)
		SELECT DISTINCT ?, value FROM json_each(?) WHERE true ORDER BY value
		RETURNING event_id`)
	q.inboxCleanup = r.Replace(`DELETE FROM {inbox} WHERE (consumer_name, event_id) IN (
		SELECT consumer_name, event_id FROM {inbox}
		WHERE processed_at < {now+}
		ORDER BY processed_at LIMIT ?)`)
}

// placeholders returns "(?, ?, ..., ?)" with n marks.
func placeholders(n int) string {
	var b strings.Builder
	b.Grow(2 + 3*n)
	b.WriteByte('(')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('?')
	}
	b.WriteByte(')')
	return b.String()
}
