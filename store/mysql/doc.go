// Package mysql is txbox's store for MySQL 8.0.13+ and MariaDB 10.6+,
// through github.com/go-sql-driver/mysql.
//
//	d, err := mysql.Open("app:secret@tcp(db:3306)/shop", mysql.Config{})
//	err = d.Migrate(ctx)
//
// or, on a pool you own, mysql.New(db, mysql.Config{Schema: "shop"}).
//
// # Isolation: READ COMMITTED, always
//
// Every transaction the driver opens (claim, dead-letter move and retry)
// runs at READ COMMITTED, and so does every single statement it sends
// outside a transaction (finishes, recovery, cleanup deletes, leases,
// dead-letter resolve and delete). At MySQL's default REPEATABLE READ, locking reads and range
// UPDATE/DELETE take next-key (gap) locks; concurrent pollers and
// publishers' inserts then deadlock on each other's gaps. At READ
// COMMITTED InnoDB locks only the rows it returns, and SKIP LOCKED hands
// each poller a disjoint batch. Every write also takes its row locks in
// one order, through the primary key in key order, holding none before
// (docs/schema/mysql.md, "Lock order"): READ COMMITTED alone still deadlocked about
// one test run in six on MariaDB.
//
// Open (and OpenDB) set it once per connection with SET SESSION
// TRANSACTION ISOLATION LEVEL READ COMMITTED, a statement both MySQL 8 and
// MariaDB accept (their DSN variables differ: transaction_isolation vs
// tx_isolation). On a pool given to New the driver cannot know the
// session's level, so it sends SET TRANSACTION ISOLATION LEVEL READ
// COMMITTED before each of its transactions (one extra round trip) and
// wraps single statements in a transaction — unless
// Config.SessionReadCommitted says the pool is already READ COMMITTED.
// Publishing joins the caller's transaction at whatever level the caller
// chose: a plain INSERT takes no gap locks that pollers wait on.
//
// For a pool of your own, add interpolateParams=true (one round trip per
// statement instead of prepare + execute) and maxAllowedPacket=0 (the
// driver then refuses oversized statements itself) to the DSN, as OpenDB
// does.
//
// MySQL refuses READ COMMITTED transactions that write when the binary
// log is statement-based (error 1665): binlog_format must be ROW (MySQL
// 8's default) or MIXED (MariaDB's).
//
// MySQL has no LISTEN/NOTIFY: the driver does not implement store.Waker
// and ignores OutboxInsertParams.Notify. Relays find new rows by polling,
// or through an in-process publisher's wake-up.
//
// # Claim
//
// MySQL has no UPDATE ... RETURNING, so a claim is one short transaction:
//
//	SELECT ... FROM outbox FORCE INDEX (txbox_claim)
//	 WHERE status = 'PENDING' AND event_type = ? AND due_at <= UTC_TIMESTAMP(6)
//	 ORDER BY due_at, id LIMIT ? FOR UPDATE SKIP LOCKED;
//	UPDATE outbox FORCE INDEX (PRIMARY) SET status = 'IN_PROCESS', lease_until = ..., lease_token = ?
//	 WHERE id IN (...);
//	COMMIT;
//
// The index is forced: should the optimizer choose a filesort, FOR UPDATE
// would lock every matching row before the LIMIT, and the other pollers
// would skip them all.
//
// # Schema choices
//
// Ids are CHAR(36) CHARACTER SET ascii COLLATE ascii_bin: the canonical
// lowercase text of the UUID. BINARY(16) would be 20 bytes shorter per
// index entry, but every plain-SQL producer, every ad hoc query and every
// admin tool would have to call UUID_TO_BIN/BIN_TO_UUID (MySQL only;
// MariaDB's UUID type is 10.7+), and ids would look different here than in
// the broker headers. ascii_bin makes the text compact (36 bytes) and
// compares bytes, which for lowercase hex is exactly UUID order, so
// UUIDv7 ids append at the tail of the primary key.
//
// A producer that inserts with plain SQL may omit the id. The default is
// not UUID(): MySQL's and MariaDB's UUID() is version 1, whose text starts
// with the low bits of the clock, so those ids would land at random places
// in the primary key and would not sort by time — breaking per-key order
// (ordering: key compares ids) and tail inserts. The default is instead an
// expression that builds a UUIDv7 from UTC_TIMESTAMP(6) (48-bit
// millisecond prefix) and random bits: time-ordered across milliseconds,
// and interleaving correctly with the library's ids. Within one
// millisecond the order of such ids is random, so a plain-SQL producer
// that needs strict per-key order for events published in the same
// millisecond should supply its own UUIDv7 ids (lowercase).
//
// All times are DATETIME(6) in UTC, set with UTC_TIMESTAMP(6) (never
// NOW(), which follows the session's time_zone), so relays and producers
// with different session time zones agree. The driver reads them back as
// UTC whatever the DSN's parseTime and loc are.
//
// Payloads are LONGBLOB (up to 4 GiB; in practice bounded by the server's
// max_allowed_packet, 16 MiB by default on MariaDB, 64 MiB on MySQL 8). A
// publish batch whose payloads exceed Config.MaxInsertBytes is split into
// several INSERTs inside the same caller transaction. Headers are JSON
// (MariaDB stores JSON as LONGTEXT with a validity check). event_key is
// VARBINARY(1024): keys compare byte for byte, and a key that is not valid
// UTF-8 cannot fail the insert.
//
// # Migrations
//
// Migrate applies the embedded, versioned migrations (migrations/*.sql,
// rendered with the configured schema and prefix; [Migrations] returns the
// same SQL with each step's revert for goose or golang-migrate users, and
// `txbox migrate get` writes it as files) while holding
// GET_LOCK on one connection, and records each in the schema_version
// table. MySQL DDL commits implicitly, so each statement is CREATE ... IF
// NOT EXISTS and a migration interrupted half way is simply run again.
//
// # Errors
//
// Driver errors are translated by MySQL error number, never by message:
// 1146 (no such table) matches ErrNotMigrated, 1153 (packet too large)
// matches ErrPacketTooLarge, 1406 (data too long) matches
// ErrInvalidParams, 1213 (deadlock) matches store.ErrTxConflict. A
// transaction of the driver's own that InnoDB picked as a deadlock victim
// was rolled back whole, so it is re-run (up to 4 times, after a few
// random milliseconds). A payload larger than the server's
// max_allowed_packet (read once, through the caller's transaction) is
// refused before it is sent, with ErrPacketTooLarge.
//
// docs/schema/mysql.md documents every table, index and statement,
// with the row reads measured at 100k rows.
package mysql
