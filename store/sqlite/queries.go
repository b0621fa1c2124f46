package sqlite

import (
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/store"
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

	claim        string
	claimOrdered string
	finishAck    string // ids as a JSON array
	finishDelete string // ids as a JSON array
	finishRetry  string
	finishFailed string
	finishReleas string
	recover      string
	pendingTypes string
	stats        string
	cleanup      string

	deadLetterMove       string
	deadLetterMoveDelete string // + id list
	deadLetterSelect     string // columns of a dead letter, FROM included
	deadLetterCount      string
	deadLetterRetry      string // + id list + conflict clause
	deadLetterRetryDel   string // + id list
	deadLetterResolve    string // + id list
	deadLetterDelete     string // + id list
	deadLetterCleanup    string

	leaseAcquire string
	leaseRelease string
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

func buildQueries(t store.Tables) queries {
	r := strings.NewReplacer(
		"{outbox}", quote(t.Outbox),
		"{dead_letter}", quote(t.DeadLetter),
		"{inbox}", quote(t.Inbox),
		"{lease}", quote(t.Lease),
		"{schema_version}", quote(t.SchemaVersion),
		"{now}", nowSQL,
		"{now+}", nowPlusSQL,
	)
	claimBase := `UPDATE {outbox} SET status = 'IN_PROCESS', lease_until = {now+}, lease_token = ?
WHERE id IN (
    SELECT id FROM {outbox} AS o
    WHERE o.status = 'PENDING' AND o.event_type = ? AND o.due_at <= {now}%s
    ORDER BY o.due_at, o.id
    LIMIT ?)
RETURNING id, event_type, event_key, payload, headers, attempts, created_at, due_at`
	orderedCond := `
      AND (o.event_key IS NULL OR o.event_key = '' OR (
        NOT EXISTS (
            SELECT 1 FROM {outbox} AS e
            WHERE e.event_type = o.event_type AND e.event_key = o.event_key AND e.id < o.id
              AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED'))
        AND NOT EXISTS (
            SELECT 1 FROM {dead_letter} AS x
            WHERE x.event_type = o.event_type AND x.event_key = o.event_key
              AND x.status = 'UNRESOLVED')))`
	dlCols := `id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at, status, resolved_at`
	qs := queries{
		lockGrab: r.Replace(`UPDATE {lease} SET name = name WHERE 0`),

		schemaVersionCreate: r.Replace(`CREATE TABLE IF NOT EXISTS {schema_version} (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL DEFAULT '',
    applied_at TEXT    NOT NULL DEFAULT ({now}))`),
		schemaVersionMax:    r.Replace(`SELECT coalesce(max(version), 0) FROM {schema_version}`),
		schemaVersionInsert: r.Replace(`INSERT INTO {schema_version} (version, name) VALUES (?, ?)`),

		insertPrefix: r.Replace(`INSERT INTO {outbox} (id, event_type, event_key, payload, headers, due_at) VALUES `),
		insertRow:    r.Replace(`(?, ?, ?, ?, ?, coalesce(max(?, {now}), {now}))`),
		// Most events have no NotBefore: the simpler statement compiles
		// and runs measurably faster (see docs/benchmarks/sqlite.md).
		insertPrefixNoDue: r.Replace(`INSERT INTO {outbox} (id, event_type, event_key, payload, headers) VALUES `),
		insertRowNoDue:    `(?, ?, ?, ?, ?)`,

		claim:        r.Replace(fmt.Sprintf(claimBase, "")),
		claimOrdered: r.Replace(fmt.Sprintf(claimBase, orderedCond)),
		finishAck: r.Replace(`UPDATE {outbox}
SET status = 'PROCESSED', processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE lease_token = ? AND status = 'IN_PROCESS' AND id IN (SELECT value FROM json_each(?))`),
		finishDelete: r.Replace(`DELETE FROM {outbox}
WHERE lease_token = ? AND status = 'IN_PROCESS' AND id IN (SELECT value FROM json_each(?))`),
		finishRetry: r.Replace(`UPDATE {outbox}
SET status = 'PENDING', attempts = attempts + 1, due_at = {now+}, last_error = ?, lease_until = NULL, lease_token = NULL
WHERE id = ? AND lease_token = ? AND status = 'IN_PROCESS'`),
		// processed_at of a FAILED row is when it failed: the dead-letter
		// mover copies it into failed_at.
		finishFailed: r.Replace(`UPDATE {outbox}
SET status = 'FAILED', attempts = attempts + 1, last_error = ?, processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE id = ? AND lease_token = ? AND status = 'IN_PROCESS'`),
		finishReleas: r.Replace(`UPDATE {outbox}
SET status = 'PENDING', due_at = {now+}, lease_until = NULL, lease_token = NULL
WHERE id = ? AND lease_token = ? AND status = 'IN_PROCESS'`),
		recover: r.Replace(`UPDATE {outbox}
SET status = 'PENDING', due_at = {now}, lease_until = NULL, lease_token = NULL
WHERE id IN (
    SELECT id FROM {outbox}
    WHERE status = 'IN_PROCESS' AND lease_until < {now}
    ORDER BY lease_until
    LIMIT ?)`),
		// A loose index scan over the claim index: one index seek per
		// distinct type instead of reading every pending row.
		pendingTypes: r.Replace(`WITH RECURSIVE t(event_type) AS (
    SELECT (SELECT min(event_type) FROM {outbox} WHERE status = 'PENDING')
    UNION ALL
    SELECT (SELECT min(o.event_type) FROM {outbox} AS o WHERE o.status = 'PENDING' AND o.event_type > t.event_type)
    FROM t WHERE t.event_type IS NOT NULL)
SELECT event_type FROM t WHERE event_type IS NOT NULL`),
		// One branch per status, each read through that status's partial
		// index, so PROCESSED rows kept for retention are never scanned.
		stats: r.Replace(`SELECT event_type, sum(p), sum(ip), sum(f),
    coalesce(CAST(round((julianday('now') - julianday(min(oldest))) * 86400000.0) AS INTEGER), 0)
FROM (
    SELECT event_type, count(*) AS p, 0 AS ip, 0 AS f, min(created_at) AS oldest
    FROM {outbox} WHERE status = 'PENDING' GROUP BY event_type
    UNION ALL
    SELECT event_type, 0, count(*), 0, NULL FROM {outbox} WHERE status = 'IN_PROCESS' GROUP BY event_type
    UNION ALL
    SELECT event_type, 0, 0, count(*), NULL FROM {outbox} WHERE status = 'FAILED' GROUP BY event_type)
GROUP BY event_type
ORDER BY event_type`),
		cleanup: r.Replace(`DELETE FROM {outbox}
WHERE id IN (
    SELECT id FROM {outbox}
    WHERE status = 'PROCESSED' AND processed_at < {now+}
    ORDER BY processed_at
    LIMIT ?)`),

		// WHERE true: SQLite's parser needs it between INSERT ... SELECT
		// and an upsert clause. failed_at is when the row failed (its
		// processed_at, set by finishFailed); rows failed before that was
		// recorded get the move time.
		deadLetterMove: r.Replace(`INSERT INTO {dead_letter} (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at, status)
SELECT id, event_type, event_key, payload, headers, attempts, last_error, created_at, coalesce(processed_at, {now}), 'UNRESOLVED'
FROM {outbox} WHERE status = 'FAILED' AND true
ORDER BY id
LIMIT ?
ON CONFLICT (id) DO UPDATE SET
    event_type = excluded.event_type, event_key = excluded.event_key, payload = excluded.payload,
    headers = excluded.headers, attempts = excluded.attempts, last_error = excluded.last_error,
    created_at = excluded.created_at, failed_at = excluded.failed_at, status = 'UNRESOLVED', resolved_at = NULL
RETURNING id`),
		deadLetterMoveDelete: r.Replace(`DELETE FROM {outbox} WHERE status = 'FAILED' AND id IN `),
		deadLetterSelect:     r.Replace(`SELECT ` + dlCols + ` FROM {dead_letter}`),
		deadLetterCount:      r.Replace(`SELECT count(*) FROM {dead_letter}`),
		deadLetterRetry: r.Replace(`INSERT INTO {outbox} (id, event_type, event_key, payload, headers, status, attempts, due_at, last_error, created_at)
SELECT id, event_type, event_key, payload, headers, 'PENDING', 0, {now}, last_error, created_at
FROM {dead_letter} WHERE id IN `),
		deadLetterRetryDel: r.Replace(`DELETE FROM {dead_letter} WHERE id IN `),
		deadLetterResolve: r.Replace(`UPDATE {dead_letter} SET status = 'RESOLVED', resolved_at = {now}
WHERE status = 'UNRESOLVED' AND id IN `),
		deadLetterDelete: r.Replace(`DELETE FROM {dead_letter} WHERE id IN `),
		deadLetterCleanup: r.Replace(`DELETE FROM {dead_letter}
WHERE id IN (
    SELECT id FROM {dead_letter}
    WHERE status = 'RESOLVED' AND resolved_at < {now+}
    ORDER BY resolved_at
    LIMIT ?)`),

		leaseAcquire: r.Replace(`INSERT INTO {lease} (name, holder, lease_until) VALUES (?, ?, {now+})
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, lease_until = excluded.lease_until
WHERE {lease}.lease_until < {now} OR {lease}.holder = excluded.holder`),
		leaseRelease: r.Replace(`DELETE FROM {lease} WHERE name = ? AND holder = ?`),
	}
	qs.insertOne = qs.insertPrefix + qs.insertRow
	qs.insertOneNoDue = qs.insertPrefixNoDue + qs.insertRowNoDue
	return qs
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
