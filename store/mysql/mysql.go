package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/pertype"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// Dialect is the name returned by Driver.Dialect.
const Dialect = "mysql"

// DefaultMaxInsertBytes is the default of Config.MaxInsertBytes: 4 MiB, a
// quarter of MariaDB's default max_allowed_packet (16 MiB; MySQL 8's is
// 64 MiB), leaving room for escaping and the other columns.
const DefaultMaxInsertBytes = 4 << 20

// Sentinel errors of the MySQL store. Driver errors that match none of
// them are returned wrapped, with the operation's name.
var (
	// ErrNotMigrated is returned when a txbox table does not exist (MySQL
	// error 1146): run Migrate (or `txbox migrate`) first.
	ErrNotMigrated = errors.New("mysql: txbox tables are missing; run Migrate")

	// ErrPacketTooLarge is returned when a statement exceeds the server's
	// max_allowed_packet (error 1153 or the driver's own check). Raise
	// max_allowed_packet or lower Config.MaxInsertBytes.
	ErrPacketTooLarge = errors.New("mysql: statement exceeds max_allowed_packet")

	// ErrInvalidParams is returned when a call's parameters are out of
	// range (a Limit below 1, a negative duration, a key longer than the
	// column). Nothing is sent to the database. It matches
	// store.ErrInvalidParams.
	ErrInvalidParams = fmt.Errorf("mysql: %w", store.ErrInvalidParams)

	// ErrUnsupportedServer is returned by Migrate when the server is older
	// than MySQL 8.0.13 or MariaDB 10.6 (SKIP LOCKED and expression
	// defaults are required).
	ErrUnsupportedServer = errors.New("mysql: server version not supported (need MySQL 8.0.13+ or MariaDB 10.6+)")
)

// MaxKeyLength is the longest event key, in bytes, the event_key column
// (VARBINARY(1024)) stores. Longer keys are refused at publish time.
const MaxKeyLength = 1024

// maxErrorLength bounds last_error (a TEXT column, 64 KiB) well below the
// column so a huge error message never fails the finish.
const maxErrorLength = 8 << 10

// Config configures a Driver.
type Config struct {
	// Schema is the database that holds txbox's tables. Empty means the
	// connection's default database (the one named in the DSN). Defaults
	// to "".
	Schema string
	// TablePrefix prefixes every table name. Defaults to
	// store.DefaultTablePrefix ("txbox_").
	TablePrefix string
	// SessionReadCommitted declares that every connection of the pool
	// given to New already runs at READ COMMITTED (for example a pool from
	// OpenDB, or a DSN with transaction_isolation='READ-COMMITTED'). The
	// driver then skips the SET TRANSACTION round trip it otherwise sends
	// before each of its own transactions and runs single statements
	// without a transaction. Open sets it. Defaults to false.
	SessionReadCommitted bool
	// MaxInsertBytes bounds the payload bytes of one INSERT statement of
	// OutboxInsert. A batch whose payloads add up to more is inserted with
	// several statements, all inside the caller's transaction, so it stays
	// atomic and stays under the server's max_allowed_packet. Defaults to
	// DefaultMaxInsertBytes.
	MaxInsertBytes int
}

// Driver is the MySQL / MariaDB implementation of store.Driver. It is safe
// for concurrent use.
type Driver struct {
	db        *sql.DB
	ownsDB    bool
	sessionRC bool
	maxInsert int
	tables    store.Tables
	// Quoted, schema-qualified table names, ready to splice into SQL. They
	// are built only from names store.NewTables validated.
	qOutbox, qDeadLetter, qInbox, qLease, qSchemaVersion string
	qInstance                                            string
	// q holds every statement, rendered with those names (queries.go).
	q queries

	// maxPacket caches the server's max_allowed_packet, read once on the
	// first publish; 0 until then or when it could not be read.
	maxPacket atomic.Int64

	// isolation, when not LevelDefault, replaces READ COMMITTED for the
	// driver's transactions: only the control experiment in the tests
	// sets it, to show what REPEATABLE READ does.
	isolation sql.IsolationLevel

	// deadlockRetries counts transactions retried after error 1213. The
	// READ COMMITTED design should keep it at zero; tests assert that.
	deadlockRetries atomic.Int64

	// ordered holds the ordered claim's cursors by event type.
	ordered pertype.Map[sqlstore.Cursor]
}

var (
	_ store.Driver = (*Driver)(nil)
)

// New returns a Driver on db, a pool opened with the go-sql-driver/mysql
// driver. The pool stays the caller's: Close does not close it. Unless
// cfg.SessionReadCommitted is set, each transaction the driver opens sets
// READ COMMITTED for itself (REPEATABLE READ's gap locks deadlock
// concurrent pollers). New sends nothing to the database.
func New(db *sql.DB, cfg Config) (*Driver, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidParams)
	}
	tables, err := store.NewTables(cfg.Schema, cfg.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	if cfg.MaxInsertBytes < 0 {
		return nil, fmt.Errorf("%w: MaxInsertBytes must not be negative", ErrInvalidParams)
	}
	if cfg.MaxInsertBytes == 0 {
		cfg.MaxInsertBytes = DefaultMaxInsertBytes
	}
	d := &Driver{
		db:        db,
		sessionRC: cfg.SessionReadCommitted,
		maxInsert: cfg.MaxInsertBytes,
		tables:    tables,
	}
	d.setNames()
	d.q = d.buildQueries()
	return d, nil
}

// setNames derives the quoted table names from d.tables.
func (d *Driver) setNames() {
	d.qOutbox = d.qualify(d.tables.Outbox)
	d.qDeadLetter = d.qualify(d.tables.DeadLetter)
	d.qInbox = d.qualify(d.tables.Inbox)
	d.qLease = d.qualify(d.tables.Lease)
	d.qSchemaVersion = d.qualify(d.tables.SchemaVersion)
	d.qInstance = d.qualify(d.tables.Instance)
}

// Open opens a pool with OpenDB and returns a Driver on it that Close
// closes. cfg.SessionReadCommitted is set, since OpenDB guarantees it.
func Open(dsn string, cfg Config) (*Driver, error) {
	// Validate names before opening anything, so a hostile prefix costs no
	// connection.
	if _, err := store.NewTables(cfg.Schema, cfg.TablePrefix); err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db, err := OpenDB(dsn)
	if err != nil {
		return nil, err
	}
	cfg.SessionReadCommitted = true
	d, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.ownsDB = true
	return d, nil
}

// OpenDB opens a go-sql-driver/mysql pool whose every connection runs at
// READ COMMITTED: right after connecting it sends SET SESSION TRANSACTION
// ISOLATION LEVEL READ COMMITTED, which MySQL 8 and MariaDB both accept
// (their DSN variables differ: transaction_isolation / tx_isolation). It
// also turns on interpolateParams, saving the prepare round trip of every
// statement, and sets maxAllowedPacket=0 (use the server's value, read at
// connect), so an oversized statement is refused with ErrPacketTooLarge
// instead of a connection reset. Use it to share one pool between the relay and your code
// through New with SessionReadCommitted. Like sql.Open it does not
// connect; a malformed DSN is an error.
func OpenDB(dsn string) (*sql.DB, error) {
	mc, err := gomysql.ParseDSN(dsn)
	if err != nil {
		// The driver's parse errors do not echo the DSN, so no password
		// leaks through them.
		return nil, fmt.Errorf("mysql: %w", err)
	}
	mc.InterpolateParams = true
	// 0 makes the driver read the server's max_allowed_packet when it
	// connects, so an oversized statement fails with ErrPktTooLarge before
	// it is sent, instead of the server resetting the connection.
	mc.MaxAllowedPacket = 0
	conn, err := gomysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return sql.OpenDB(readCommittedConnector{conn}), nil
}

// readCommittedConnector sets READ COMMITTED on each new connection.
type readCommittedConnector struct{ driver.Connector }

func (c readCommittedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("mysql: connection does not implement ExecerContext")
	}
	if _, err := ex.ExecContext(ctx, readCommittedSQL, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// DeadlockRetries returns how many of the driver's own transactions were
// re-run because InnoDB chose them as a deadlock victim. It should stay 0;
// export it as a metric to see whether it does in production.
func (d *Driver) DeadlockRetries() int64 { return d.deadlockRetries.Load() }

// Dialect returns "mysql".
func (d *Driver) Dialect() string { return Dialect }

// DB returns the pool the driver uses.
func (d *Driver) DB() *sql.DB { return d.db }

// MaxConns is the most open connections of the driver's pool, 0 when
// unbounded. The relay leaves part of it to everything but the lock
// claims (relay.Config.LockBudget).
func (d *Driver) MaxConns() int { return d.db.Stats().MaxOpenConnections }

// Tables returns the validated table names the driver uses.
func (d *Driver) Tables() store.Tables { return d.tables }

// Close closes the pool if Open opened it; a pool given to New is left
// open.
func (d *Driver) Close() error {
	if d.ownsDB {
		return d.db.Close()
	}
	return nil
}

// qualify backtick-quotes a validated table name, prefixed by the
// validated schema when one is configured. Validation allows no backtick,
// so no escaping is needed; quoting still protects reserved words.
func (d *Driver) qualify(name string) string {
	if d.tables.Schema != "" {
		return "`" + d.tables.Schema + "`.`" + name + "`"
	}
	return "`" + name + "`"
}

// begin starts one of the driver's own transactions at READ COMMITTED.
func (d *Driver) begin(ctx context.Context) (*sql.Tx, error) {
	if d.isolation != sql.LevelDefault {
		return d.db.BeginTx(ctx, &sql.TxOptions{Isolation: d.isolation})
	}
	if d.sessionRC {
		return d.db.BeginTx(ctx, nil)
	}
	return d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

// maxDeadlockRetries bounds how often one of the driver's own
// transactions is re-run after InnoDB chose it as a deadlock victim. The
// whole transaction was rolled back and has no effect outside the
// database, so re-running it is safe.
const maxDeadlockRetries = 4

// inTx runs fn in one of the driver's own READ COMMITTED transactions and
// commits it, re-running it after a deadlock (1213). With READ COMMITTED,
// SKIP LOCKED and the lock order of this package (docs/schema/mysql.md, "Lock order")
// no deadlock has been measured in the tests; the retry is a safety net,
// and it is counted so tests can assert it stayed unused.
func (d *Driver) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := d.inTxOnce(ctx, fn)
		if !d.retryDeadlock(ctx, err, attempt) {
			return err
		}
	}
}

// retryDeadlock reports whether err is a deadlock worth another attempt,
// and if so counts it and waits a few random milliseconds so the two
// victims do not collide again in lockstep.
func (d *Driver) retryDeadlock(ctx context.Context, err error, attempt int) bool {
	if err == nil || !isDeadlock(err) || attempt >= maxDeadlockRetries || ctx.Err() != nil {
		return false
	}
	d.deadlockRetries.Add(1)
	t := time.NewTimer(time.Duration(1+rand.IntN(5<<attempt)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (d *Driver) inTxOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := d.begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// exec runs one statement at READ COMMITTED: directly when the session is
// known to be READ COMMITTED, else inside a short transaction.
func (d *Driver) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if d.sessionRC {
		for attempt := 0; ; attempt++ {
			n, err := sqlstore.Affected(d.db.ExecContext(ctx, query, args...))
			if err != nil && d.retryDeadlock(ctx, err, attempt) {
				continue
			}
			return n, err
		}
	}
	var n int64
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = sqlstore.Affected(tx.ExecContext(ctx, query, args...))
		return err
	})
	return n, err
}

// MySQL server error numbers the driver acts on.
const (
	errDeadlock        = 1213
	errLockWaitTimeout = 1205
	errNoSuchTable     = 1146
	errPacketTooLarge  = 1153
	errDataTooLong     = 1406
	// A CHECK constraint of that name exists: ER_CHECK_CONSTRAINT_DUP_NAME
	// on MySQL 8, ER_DUP_CONSTRAINT_NAME on MariaDB.
	errDupCheckMySQL   = 3822
	errDupCheckMariaDB = 1826
	// ER_DUP_FIELDNAME: a column of that name exists (an ADD COLUMN run
	// again).
	errDupColumn = 1060
)

func mysqlErrno(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func isDeadlock(err error) bool { return mysqlErrno(err) == errDeadlock }

// wrap translates a driver error into the store's sentinels by error
// number (never by message text) and names the operation.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	switch mysqlErrno(err) {
	case errNoSuchTable:
		return fmt.Errorf("mysql: %s: %w: %w", op, ErrNotMigrated, err)
	case errPacketTooLarge:
		return fmt.Errorf("mysql: %s: %w: %w", op, ErrPacketTooLarge, err)
	case errDataTooLong:
		return fmt.Errorf("mysql: %s: %w: %w", op, ErrInvalidParams, err)
	case errDeadlock:
		// InnoDB rolled the whole transaction back: nothing of it
		// survived, so the caller may run it again.
		return fmt.Errorf("mysql: %s: %w: %w", op, store.ErrTxConflict, err)
	}
	if errors.Is(err, gomysql.ErrPktTooLarge) {
		return fmt.Errorf("mysql: %s: %w: %w", op, ErrPacketTooLarge, err)
	}
	return fmt.Errorf("mysql: %s: %w", op, err)
}

// timeLayout is how DATETIME(6) values are written and read as text.
const timeLayout = "2006-01-02 15:04:05.999999"

// dbTimeArg formats t as a DATETIME(6) literal in UTC. Times are passed as
// text rather than time.Time so that the pool's loc setting cannot shift
// them: every stored time is UTC (UTC_TIMESTAMP(6)).
func dbTimeArg(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.000000")
}

// micros converts d to whole microseconds, the resolution of DATETIME(6).
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// nullTime scans a DATETIME(6) column into a UTC time.Time whatever the
// pool's parseTime and loc settings are. NULL scans as the zero time.
type nullTime struct{ t *time.Time }

func (n nullTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n.t = time.Time{}
	case time.Time:
		// The stored wall clock is UTC; reinterpret it whatever loc the
		// driver parsed it in.
		*n.t = time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
	case []byte:
		return n.parse(string(v))
	case string:
		return n.parse(v)
	default:
		return fmt.Errorf("mysql: cannot scan %T as a time", src)
	}
	return nil
}

func (n nullTime) parse(s string) error {
	t, err := time.ParseInLocation(timeLayout, s, time.UTC)
	if err != nil {
		return fmt.Errorf("mysql: bad DATETIME %q: %w", s, err)
	}
	*n.t = t
	return nil
}

// idScan scans a CHAR(36) id; NULL scans as the zero id.
type idScan struct{ id *txbox.ID }

func (s idScan) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.id = txbox.ID{}
		return nil
	case []byte:
		return s.parse(string(v))
	case string:
		return s.parse(v)
	default:
		return fmt.Errorf("mysql: cannot scan %T as an id", src)
	}
}

func (s idScan) parse(v string) error {
	id, err := txbox.ParseID(v)
	if err != nil {
		return err
	}
	*s.id = id
	return nil
}

// idArgs appends the text form of ids to args.
func idArgs(args []any, ids []txbox.ID) []any {
	for _, id := range ids {
		args = append(args, id.String())
	}
	return args
}

// cleanError makes a last-error text storable: valid UTF-8 without NUL
// (the column is utf8mb4 and strict mode rejects invalid bytes; NUL is
// dropped as on every dialect, store.SanitizeText) and bounded in size.
func cleanError(s string) string {
	s = store.SanitizeText(s)
	if len(s) > maxErrorLength {
		s = s[:maxErrorLength]
		// Do not cut a multi-byte character in half.
		s = strings.ToValidUTF8(s, "")
	}
	return s
}
