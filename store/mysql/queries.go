package mysql

import (
	"strings"

	"github.com/txbox/txbox/store/internal/sqlstore"
)

// queries holds every statement of the driver, rendered once in New with
// the validated, quoted table names ({{outbox}}, {{dead_letter}},
// {{inbox}}, {{lease}}, {{schema_version}}), as store/postgres does.
// {{ids}} stands for a list of id placeholders that the call fills in
// (inIDs). Four statements have a length that depends on the call; for
// them this holds the fixed parts and a builder next to the caller adds
// the repeated ones: the multi-row INSERT of a publish (insertSQL), the
// CASE lists of a finish (finishUpdate, fencedWrite), the per-key reads of
// the ordered claim (keyRuns) and the dead-letter filters
// (deadLetterWhere).
type queries struct {
	// Failure groups (groups.go).
	groups sqlstore.GroupSQL
	// Outbox: publish, claim, finish, recovery, discovery, stats, cleanup.
	insert, insertRow, insertRowNotBefore string
	claim, claimUpdate                    string
	finishDelete, finishUpdate            string
	recoverSelect, recoverWrite           string
	pendingTypes, stats                   string
	cleanupSelect, cleanupWrite           string

	// The ordered claim (ordered.go): the keyless window, the key walk,
	// one key's run, and the lock of the chosen rows.
	orderedWindow                      string
	pendingKeysFirst, pendingKeysAfter string
	keyRun, keyRunUnexpanded           string
	orderedLock                        string

	// Fan-out (fanout.go).
	expandCandidates, expandLock, expandTaken string
	expandFirst, expandFail, splitRetain      string
	expandInsert, expandCopy, pendingRoutes   string
	dropRouteSelect, dropRouteWrite           string

	// Dead letters.
	dlMoveCandidates, dlMoveLock, dlMoveExisting, dlMoveInsert  string
	dlList, dlListIDs, dlListAfter, dlListOrder, dlCount, dlGet string
	dlRetryLock, dlRetryPresent, dlRetryInsert                  string
	dlResolve, dlDelete, dlCleanupSelect, dlCleanupWrite        string
	outboxDeleteOne, dlDeleteOne                                string

	// Operators' views and relay heartbeats (inspect.go).
	inspectGroups, inspectLastError, parkedKeys                string
	instanceForget, instanceBeat, instanceList, instanceRemove string

	// The audit trail (audit.go).
	audit auditQueries

	// Leases.
	leaseUpdate, leaseInsert, leaseHeld, leaseRelease string

	// Inbox.
	inboxInsert, inboxRow, inboxCleanup string

	// Migrations and the schema version.
	schemaVersionCreate, schemaVersionMax, schemaVersionInsert string
}

// Statements that name no table.
const (
	readCommittedSQL    = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
	maxAllowedPacketSQL = "SELECT @@max_allowed_packet"

	inboxSavepoint   = "SAVEPOINT txbox_inbox_record"
	inboxRollbackTo  = "ROLLBACK TO SAVEPOINT txbox_inbox_record"
	migrateLockSQL   = "SELECT GET_LOCK(?, ?)"
	migrateUnlockSQL = "SELECT RELEASE_LOCK(?)"
	currentDBSQL     = "SELECT DATABASE()"
	schemaExistsSQL  = "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?"
	versionSQL       = "SELECT VERSION()"
)

// createDatabaseSQL creates the configured schema (a validated name).
func createDatabaseSQL(schema string) string {
	return "CREATE DATABASE IF NOT EXISTS `" + schema + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
}

// buildQueries renders every statement for d's tables, area by area.
func (d *Driver) buildQueries() queries {
	var q queries
	d.outboxQueries(&q)
	d.orderedQueries(&q)
	d.fanoutQueries(&q)
	d.deadLetterQueries(&q)
	d.groupQueries(&q)
	d.auditSQL(&q)
	d.inspectQueries(&q)
	d.leaseQueries(&q)
	d.inboxQueries(&q)
	d.schemaQueries(&q)
	return q
}

// deleteByID and updateByID begin a write whose WHERE selects rows by a
// list of primary keys. The primary key is forced: such a write must read
// and lock exactly its rows, in key order, whatever the statistics say
// and whatever else its WHERE tests (docs/schema/mysql.md, "Lock order"). A
// single-table DELETE takes no index hint, so the multi-table form is
// used; it names the table itself rather than an alias, which MariaDB
// cannot resolve when the connection has no default database.
func deleteByID(table string) string {
	return "DELETE " + table + " FROM " + table + " FORCE INDEX (PRIMARY)"
}

func updateByID(table string) string { return "UPDATE " + table + " FORCE INDEX (PRIMARY)" }

func (d *Driver) outboxQueries(q *queries) {
	q.insert = d.render("INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, due_at) VALUES ")
	q.insertRow = "(?, ?, ?, ?, ?, UTC_TIMESTAMP(6))"
	q.insertRowNotBefore = "(?, ?, ?, ?, ?, GREATEST(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)))"
	q.claim = d.render("SELECT o.id, o.event_key, o.payload, o.headers, o.attempts, o.created_at, o.route, o.event_id FROM {{outbox}}" +
		" o FORCE INDEX (txbox_claim) WHERE o.status = 'PENDING' AND o.event_type = ? AND o.route = ? AND o.due_at <= UTC_TIMESTAMP(6)" +
		" ORDER BY o.due_at, o.id LIMIT ? FOR UPDATE SKIP LOCKED")
	// By primary key only, in key order (docs/schema/mysql.md, "Lock order"): the
	// claim's transaction already holds the rows' locks.
	q.claimUpdate = updateByID(d.qOutbox) + " SET status = 'IN_PROCESS', lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, lease_token = ?" +
		" WHERE id IN ({{ids}})"
	q.finishDelete = deleteByID(d.qOutbox)
	q.finishUpdate = updateByID(d.qOutbox) + " SET"
	const recoverCond = "status = 'IN_PROCESS' AND lease_until < UTC_TIMESTAMP(6)"
	q.recoverSelect = d.render("SELECT id FROM {{outbox}} FORCE INDEX (txbox_claim) WHERE " + recoverCond + " LIMIT ?")
	q.recoverWrite = updateByID(d.qOutbox) + " SET status = 'PENDING', due_at = UTC_TIMESTAMP(6), lease_until = NULL, lease_token = NULL" +
		" WHERE id IN ({{ids}}) AND " + recoverCond
	q.pendingTypes = d.render("SELECT event_type FROM {{outbox}} FORCE INDEX (txbox_claim) WHERE status = 'PENDING' AND event_type > ? ORDER BY status, event_type LIMIT 1")
	q.stats = d.render("SELECT event_type, status, COUNT(*), " +
		"TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN status = 'PENDING' THEN created_at END), UTC_TIMESTAMP(6)) FROM " +
		"{{outbox}} FORCE INDEX (txbox_claim) WHERE status IN ('FAILED', 'IN_PROCESS', 'PENDING') GROUP BY event_type, status ORDER BY event_type")
	const cleanupCond = "status = 'PROCESSED' AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
	q.cleanupSelect = d.render("SELECT id FROM {{outbox}} FORCE INDEX (txbox_cleanup) WHERE " + cleanupCond + " ORDER BY processed_at LIMIT ?")
	q.cleanupWrite = deleteByID(d.qOutbox) + " WHERE id IN ({{ids}}) AND " + cleanupCond
}

func (d *Driver) orderedQueries(q *queries) {
	q.orderedWindow = d.render("SELECT id, due_at, event_key IS NULL FROM {{outbox}}" +
		" FORCE INDEX (txbox_claim) WHERE status = 'PENDING' AND event_type = ? AND route = ? AND due_at <= UTC_TIMESTAMP(6)" +
		" AND (due_at > ? OR (due_at = ? AND id > ?)) ORDER BY due_at, id LIMIT ?")
	// DISTINCT over the index's leading columns is what MariaDB and MySQL
	// run as a loose index scan ("Using index for group-by"): one seek per
	// key, where DISTINCT event_key alone reads every PENDING entry.
	const keys = "SELECT DISTINCT event_type, route, status, event_key FROM {{outbox}} FORCE INDEX (txbox_order) WHERE event_type = ? AND route = ? AND status = 'PENDING' AND event_key IS NOT NULL"
	const keysOrder = " ORDER BY event_type, route, status, event_key LIMIT ?"
	q.pendingKeysFirst = d.render(keys + keysOrder)
	q.pendingKeysAfter = d.render(keys + " AND event_key > ?" + keysOrder)
	// One key's part of keyRuns' UNION ALL, for the claimed route. kind 0:
	// a PENDING row (flag: due); kind 1: the smallest id of an IN_PROCESS
	// or FAILED row (flag: parked by an unresolved dead letter of the
	// route or of route ''). keyRunUnexpanded adds, for a route other than
	// '', kind 2: the smallest id of the key's rows with route '' not
	// done, PENDING ones included: an event not expanded yet holds the
	// key of every route (docs/concepts.md, "Fan-out").
	q.keyRun = d.render("(SELECT ? AS k, 0 AS kind, o.id, o.due_at <= UTC_TIMESTAMP(6) AS flag FROM {{outbox}}" +
		" o FORCE INDEX (txbox_order) WHERE o.event_type = ? AND o.route = ? AND o.status = 'PENDING' AND o.event_key = ? ORDER BY o.id LIMIT ?)" +
		" UNION ALL (SELECT ?, 1, (SELECT MIN(b.id) FROM {{outbox}}" +
		" b FORCE INDEX (txbox_order) WHERE b.event_type = ? AND b.route = ? AND b.status IN ('IN_PROCESS', 'FAILED') AND b.event_key = ?), EXISTS (SELECT 1 FROM " +
		"{{dead_letter}} x FORCE INDEX (txbox_parked) WHERE x.event_type = ? AND x.event_key = ? AND x.status = 'UNRESOLVED' AND x.route IN (?, '')))")
	// Two parts: a MIN under an equality on every column before id is
	// one index seek, where a MIN over an IN list of statuses reads every
	// entry of the key, and an unexpanded key may have many PENDING ones.
	q.keyRunUnexpanded = d.render(" UNION ALL (SELECT ?, 2, (SELECT MIN(u.id) FROM {{outbox}}" +
		" u FORCE INDEX (txbox_order) WHERE u.event_type = ? AND u.route = '' AND u.status = 'PENDING' AND u.event_key = ?), FALSE)" +
		" UNION ALL (SELECT ?, 2, (SELECT MIN(u.id) FROM {{outbox}}" +
		" u FORCE INDEX (txbox_order) WHERE u.event_type = ? AND u.route = '' AND u.status IN ('IN_PROCESS', 'FAILED') AND u.event_key = ?), FALSE)")
	q.orderedLock = d.render("SELECT id, event_key, payload, headers, attempts, created_at, due_at, route, event_id FROM {{outbox}}" +
		" WHERE id IN ({{ids}}) AND status = 'PENDING' AND due_at <= UTC_TIMESTAMP(6) ORDER BY id FOR UPDATE SKIP LOCKED")
}

// deadLetterColumns are the columns scanDeadLetter reads: the payload's
// size, not the payload, which DeadLetterGet alone reads (after them).
const deadLetterColumns = "id, event_type, event_key, OCTET_LENGTH(payload), headers, attempts, last_error, created_at, failed_at, status, resolved_at, route, event_id"

func (d *Driver) deadLetterQueries(q *queries) {
	q.dlMoveCandidates = d.render("SELECT id FROM {{outbox}} FORCE INDEX (txbox_claim) WHERE status = 'FAILED' LIMIT ?")
	q.dlMoveLock = d.render("SELECT id FROM {{outbox}} FORCE INDEX (PRIMARY) WHERE status = 'FAILED' AND id IN ({{ids}}) ORDER BY id FOR UPDATE SKIP LOCKED")
	q.dlMoveExisting = d.render("SELECT id FROM {{dead_letter}} WHERE id IN ({{ids}})")
	q.dlMoveInsert = d.render("INSERT INTO {{dead_letter}}" +
		" (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at, status, resolved_at, route, event_id)" +
		" SELECT id, event_type, event_key, payload, headers, attempts, last_error, created_at, COALESCE(processed_at, UTC_TIMESTAMP(6)), 'UNRESOLVED', NULL, route, event_id FROM " +
		"{{outbox}} WHERE id IN ({{ids}})")
	q.outboxDeleteOne = d.render("DELETE FROM {{outbox}} WHERE id = ?")
	q.dlDeleteOne = d.render("DELETE FROM {{dead_letter}} WHERE id = ?")
	q.dlList = d.render("SELECT " + deadLetterColumns + " FROM {{dead_letter}}")
	q.dlListIDs = d.render("SELECT id, failed_at, status FROM {{dead_letter}}")
	q.dlListAfter = "(failed_at < ? OR (failed_at = ? AND id < ?))"
	q.dlListOrder = " ORDER BY failed_at DESC, id DESC LIMIT ?"
	q.dlCount = d.render("SELECT COUNT(*) FROM {{dead_letter}}")
	q.dlGet = d.render("SELECT " + deadLetterColumns + ", payload FROM {{dead_letter}} WHERE id = ?")
	q.dlRetryLock = d.render("SELECT id FROM {{dead_letter}} WHERE id IN ({{ids}}) AND JSON_TYPE(headers) = 'OBJECT' FOR UPDATE")
	q.dlRetryPresent = d.render("SELECT id FROM {{outbox}} WHERE id IN ({{ids}})")
	q.dlRetryInsert = d.render("INSERT INTO {{outbox}}" +
		" (id, event_type, event_key, payload, headers, status, attempts, due_at, last_error, created_at, route, event_id)" +
		" SELECT id, event_type, event_key, payload, headers, 'PENDING', 0, UTC_TIMESTAMP(6), last_error, created_at, route, event_id FROM " +
		"{{dead_letter}} WHERE id IN ({{ids}})")
	q.dlResolve = updateByID(d.qDeadLetter) + " SET status = 'RESOLVED', resolved_at = UTC_TIMESTAMP(6) WHERE status = 'UNRESOLVED' AND id IN ({{ids}})"
	q.dlDelete = deleteByID(d.qDeadLetter) + " WHERE id IN ({{ids}})"
	const cleanupCond = "status = 'RESOLVED' AND resolved_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
	q.dlCleanupSelect = d.render("SELECT id FROM {{dead_letter}} FORCE INDEX (txbox_cleanup) WHERE " + cleanupCond + " ORDER BY status, resolved_at LIMIT ?")
	q.dlCleanupWrite = deleteByID(d.qDeadLetter) + " WHERE id IN ({{ids}}) AND " + cleanupCond
}

func (d *Driver) leaseQueries(q *queries) {
	q.leaseUpdate = d.render("UPDATE {{lease}} SET holder = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND" +
		" WHERE name = ? AND (expires_at < UTC_TIMESTAMP(6) OR holder = ?)")
	// Not INSERT IGNORE, which would also turn errors into warnings: a
	// duplicate changes nothing and reports 0 rows.
	q.leaseInsert = d.render("INSERT INTO {{lease}} (name, holder, expires_at) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)" +
		" ON DUPLICATE KEY UPDATE name = name")
	q.leaseHeld = d.render("SELECT COUNT(*) FROM {{lease}} WHERE name = ? AND holder = ? AND expires_at >= UTC_TIMESTAMP(6)")
	q.leaseRelease = d.render("DELETE FROM {{lease}} WHERE name = ? AND holder = ?")
}

func (d *Driver) inboxQueries(q *queries) {
	q.inboxInsert = d.render("INSERT IGNORE INTO {{inbox}} (consumer_name, event_id) VALUES ")
	q.inboxRow = "(?,?)"
	q.inboxCleanup = d.render("DELETE FROM {{inbox}} WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?")
}

func (d *Driver) schemaQueries(q *queries) {
	q.schemaVersionCreate = d.render(`CREATE TABLE IF NOT EXISTS {{schema_version}} (
  version INT NOT NULL,
  description VARCHAR(200) NOT NULL,
  applied_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`)
	q.schemaVersionMax = d.render("SELECT COALESCE(MAX(version), 0) FROM {{schema_version}}")
	q.schemaVersionInsert = d.render("INSERT INTO {{schema_version}} (version, description) VALUES (?, ?)")
}

// render substitutes the driver's quoted table names into a statement or
// a migration.
func (d *Driver) render(sqlText string) string {
	return strings.NewReplacer(
		"{{outbox}}", d.qOutbox,
		"{{dead_letter}}", d.qDeadLetter,
		"{{inbox}}", d.qInbox,
		"{{lease}}", d.qLease,
		"{{schema_version}}", d.qSchemaVersion,
		"{{instance}}", d.qInstance,
		"{{audit}}", d.qualify(d.tables.Audit),
		// Constraint names are unique per database on MySQL 8, so they
		// carry the table prefix. The longest, with a 40-character
		// prefix, is 58 characters, within the 64 allowed.
		"{{outbox_headers_chk}}", "`"+d.tables.Outbox+"_headers_chk`",
	).Replace(sqlText)
}

// inIDs fills q's id list with n placeholders.
func inIDs(q string, n int) string {
	return strings.Replace(q, "{{ids}}", placeholders(n), 1)
}

// placeholders returns "?, ?, ..., ?" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}
