package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	// The pure-Go SQLite driver, registered as "sqlite".
	msqlite "modernc.org/sqlite"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/pertype"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// sqliteBusy is SQLITE_BUSY, the primary result code (low byte) of a
// lock wait that timed out.
const sqliteBusy = 5

// DialectName is what Driver.Dialect returns.
const DialectName = "sqlite"

// Defaults of Config.
const (
	// DefaultBusyTimeout is Config.BusyTimeout's default.
	DefaultBusyTimeout = 10 * time.Second
	// DefaultMaxOpenConns is Config.MaxOpenConns's default.
	DefaultMaxOpenConns = 16
)

// ErrInvalidConfig is returned by Open and New for a configuration they
// cannot use (a nil handle, a negative duration, an in-memory path).
// Invalid table prefixes match txbox.ErrInvalidIdentifier instead.
var ErrInvalidConfig = errors.New("sqlite: invalid configuration")

// ErrBusy matches errors of a write that waited BusyTimeout for SQLite's
// single write lock and gave up (SQLITE_BUSY): another connection or
// process held it that long. Nothing was changed; retrying later is safe.
var ErrBusy = errors.New("sqlite: database busy")

// ErrInvalidParams is returned when a call's parameters are out of range (a
// claim Limit below 1, a negative lease duration, an empty lease name). The
// call changes nothing. It wraps store.ErrInvalidParams, so either matches.
var ErrInvalidParams = fmt.Errorf("sqlite: %w", store.ErrInvalidParams)

// Config configures a Driver.
type Config struct {
	// TablePrefix prefixes every table and index name. It must pass
	// store.ValidateIdentifier. Defaults to store.DefaultTablePrefix
	// ("txbox_").
	TablePrefix string

	// BusyTimeout is how long a connection opened by Open waits for
	// SQLite's single write lock before failing with SQLITE_BUSY. It is
	// the only thing that separates a busy database from an error, so keep
	// it well above the longest write transaction. New ignores it: the
	// caller's DSN decides. Defaults to DefaultBusyTimeout (10s).
	BusyTimeout time.Duration

	// MaxOpenConns bounds the pool Open creates. SQLite has one writer, so
	// more connections only help concurrent readers. New ignores it.
	// Defaults to DefaultMaxOpenConns (16).
	MaxOpenConns int
}

func (c Config) withDefaults() Config {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = DefaultMaxOpenConns
	}
	return c
}

func (c Config) validate() error {
	if c.BusyTimeout < 0 {
		return fmt.Errorf("%w: BusyTimeout must be ≥ 0, got %s", ErrInvalidConfig, c.BusyTimeout)
	}
	if c.MaxOpenConns < 0 {
		return fmt.Errorf("%w: MaxOpenConns must be ≥ 0, got %d", ErrInvalidConfig, c.MaxOpenConns)
	}
	return nil
}

// Driver is the SQLite implementation of store.Driver. It is safe for
// concurrent use.
type Driver struct {
	// db is the pool every query runs on: the caller's (New) or the one
	// Open created.
	db *sql.DB
	// owned is true when Open created db, so Close closes it.
	owned bool
	// immediate is true when db's transactions already begin with BEGIN
	// IMMEDIATE (Open sets _txlock=immediate). Otherwise begin takes the
	// write lock with a no-op write as its first statement.
	immediate bool
	tables    store.Tables
	prefix    string
	q         queries
	// wlock serialises this Driver's own write transactions (claim,
	// finish, recovery, dead letters, leases) in process. SQLite admits one
	// writer at a time anyway; queueing here in Go wakes the next writer
	// the moment the lock is free, where SQLite's busy handler would poll
	// with sleeps of up to 100ms. Other processes and the caller's
	// transactions still meet at SQLite's lock and wait in the busy
	// handler.
	wlock chan struct{}
	// noWriterQueue skips wlock. Only the benchmarks set it, to measure
	// what the queue buys.
	noWriterQueue bool
	closed        chan struct{}

	// stmts caches statements prepared on db, by query text, for the hot
	// path (see warm). SQLite compiles a statement each time it is run
	// unprepared, which costs about a tenth of a one-row publish.
	stmts  sync.Map // string → *sql.Stmt
	warmed atomic.Bool

	// ordered holds the ordered claim's cursors by event type.
	ordered pertype.Map[sqlstore.Cursor]
}

var (
	_ store.Driver = (*Driver)(nil)
)

// Open opens (creating if needed) the SQLite database file at path and
// returns a Driver that owns the pool: Close closes it. Every connection
// runs in WAL mode (readers never wait for the writer), with
// synchronous=NORMAL (durable across application crashes; a power loss may
// lose the last transactions but never corrupts), foreign keys off,
// busy_timeout = cfg.BusyTimeout, and transactions that begin with BEGIN
// IMMEDIATE, so a transaction never fails half-way with SQLITE_BUSY when it
// first writes. Use [Driver.DB] for the business transactions you publish
// in.
//
// path is a file name, not a DSN: a file: URI or a '?' is refused, and
// ":memory:" too, because every connection of a pool would see its own
// empty database. Open does not
// migrate: call Migrate.
func Open(path string, cfg Config) (*Driver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.Contains(path, "?") {
		// A '?' is almost always DSN parameters passed as a path; they
		// would silently become part of the file name.
		return nil, fmt.Errorf("%w: path %q must name a database file (not :memory:, a file: URI or a DSN with ?parameters; Open sets the parameters itself)", ErrInvalidConfig, path)
	}
	tables, err := store.NewTables("", cfg.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db, err := sql.Open("sqlite", dsn(path, cfg))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	// Opening a connection runs the pragmas below; keep them around.
	db.SetMaxIdleConns(cfg.MaxOpenConns)
	if err := db.PingContext(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	d := newDriver(db, tables)
	d.owned = true
	d.immediate = true
	return d, nil
}

// dsn builds the modernc.org/sqlite DSN for path. The path goes through
// URL escaping so a '?' or '#' in a file name cannot inject parameters.
func dsn(path string, cfg Config) string {
	v := url.Values{}
	v.Set("_txlock", "immediate")
	v.Add("_pragma", "busy_timeout("+strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10)+")")
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "synchronous(NORMAL)")
	v.Add("_pragma", "foreign_keys(OFF)")
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath(), RawQuery: v.Encode()}
	return u.String()
}

// New returns a Driver on the caller's pool, which must come from
// modernc.org/sqlite (driver name "sqlite"). Close does not close db.
//
// Configure the pool as Open does: journal_mode(WAL), a busy_timeout, and
// ideally _txlock=immediate so your own write transactions take the write
// lock when they begin. Without a busy_timeout concurrent writers fail with
// SQLITE_BUSY. The Driver's own transactions take the write lock first
// whatever the DSN says.
func New(db *sql.DB, cfg Config) (*Driver, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tables, err := store.NewTables("", cfg.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return newDriver(db, tables), nil
}

func newDriver(db *sql.DB, tables store.Tables) *Driver {
	return &Driver{
		db:     db,
		tables: tables,
		prefix: strings.TrimSuffix(tables.Outbox, "outbox"),
		q:      buildQueries(tables),
		wlock:  make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
}

// DB returns the pool the Driver runs on. Begin business transactions on
// it and pass the *sql.Tx to OutboxInsert (through package outbox).
func (d *Driver) DB() *sql.DB { return d.db }

// Tables returns the validated table names the Driver uses.
func (d *Driver) Tables() store.Tables { return d.tables }

// Dialect returns "sqlite".
func (d *Driver) Dialect() string { return DialectName }

// Close closes the pool if Open created it. Later calls fail with
// txbox.ErrClosed where the pool reports it.
func (d *Driver) Close() error {
	select {
	case <-d.closed:
		return nil
	default:
		close(d.closed)
	}
	d.stmts.Range(func(k, v any) bool {
		_ = v.(*sql.Stmt).Close()
		d.stmts.Delete(k)
		return true
	})
	if d.owned {
		return d.db.Close()
	}
	return nil
}

// hotQueries are the statements warm prepares: everything a relay and a
// publisher run per batch.
func (d *Driver) hotQueries() []string {
	return []string{
		d.q.insertOneNoDue, d.q.insertOne,
		d.q.claim, d.q.orderedWindow, d.q.orderedKey, d.q.claimIDs,
		d.q.finishAck, d.q.finishDelete, d.q.finishRetry, d.q.finishFailed, d.q.finishReleas,
	}
}

// warm prepares the hot statements on the pool once the tables exist. It
// runs after Migrate and before the first write transaction, never inside
// a caller's transaction: preparing on the pool takes a connection, and a
// pool of one connection held by that transaction would wait forever.
// Failures are ignored; the statements then run unprepared.
func (d *Driver) warm(ctx context.Context) {
	if d.warmed.Load() {
		return
	}
	for _, q := range d.hotQueries() {
		if _, ok := d.stmts.Load(q); ok {
			continue
		}
		s, err := d.db.PrepareContext(ctx, q)
		if err != nil {
			return // tables missing yet; try again next time
		}
		if _, loaded := d.stmts.LoadOrStore(q, s); loaded {
			_ = s.Close()
		}
	}
	d.warmed.Store(true)
}

// cached returns the prepared statement for q, or nil.
func (d *Driver) cached(q string) *sql.Stmt {
	if s, ok := d.stmts.Load(q); ok {
		return s.(*sql.Stmt)
	}
	return nil
}

// errOtherDB is database/sql's error for a statement used with a
// transaction of another *sql.DB.
const errOtherDB = "statement from different database used"

// txExec runs q in tx, through the cached prepared statement when there
// is one.
func (d *Driver) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if s := d.cached(q); s != nil {
		r, err := tx.StmtContext(ctx, s).ExecContext(ctx, args...)
		if err == nil || !strings.Contains(err.Error(), errOtherDB) {
			return r, err
		}
	}
	return tx.ExecContext(ctx, q, args...)
}

// txQuery is txExec for statements that return rows.
func (d *Driver) txQuery(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if s := d.cached(q); s != nil {
		r, err := tx.StmtContext(ctx, s).QueryContext(ctx, args...)
		if err == nil || !strings.Contains(err.Error(), errOtherDB) {
			return r, err
		}
	}
	return tx.QueryContext(ctx, q, args...)
}

// lockWriter takes the in-process write slot, or fails when ctx ends first.
func (d *Driver) lockWriter(ctx context.Context) error {
	if d.noWriterQueue {
		return ctx.Err()
	}
	select {
	case d.wlock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Driver) unlockWriter() {
	if !d.noWriterQueue {
		<-d.wlock
	}
}

// begin starts a transaction that already holds SQLite's write lock, as
// BEGIN IMMEDIATE does. A deferred transaction that reads first and writes
// later fails at once with SQLITE_BUSY(_SNAPSHOT) when another connection
// wrote in between; the busy handler cannot help it. Taking the lock with
// the first statement avoids that: the busy handler waits for it instead.
func (d *Driver) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if !d.immediate {
		if _, err := tx.ExecContext(ctx, d.q.lockGrab); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	return tx, nil
}

// write runs fn in a write transaction (see begin) while holding the
// in-process write slot, and commits when fn succeeds.
func (d *Driver) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := d.check(); err != nil {
		return err
	}
	if err := d.lockWriter(ctx); err != nil {
		return err
	}
	defer d.unlockWriter()
	d.warm(ctx)
	tx, err := d.begin(ctx)
	if err != nil {
		return d.translate(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return d.translate(err)
	}
	return d.translate(tx.Commit())
}

// check returns txbox.ErrClosed after Close.
func (d *Driver) check() error {
	select {
	case <-d.closed:
		return txbox.ErrClosed
	default:
		return nil
	}
}

// translate wraps a database error with the package name, and reports
// txbox.ErrClosed when the Driver was closed meanwhile.
func (d *Driver) translate(err error) error {
	if err == nil {
		return nil
	}
	if d.check() != nil {
		return fmt.Errorf("sqlite: %w: %w", txbox.ErrClosed, err)
	}
	var se *msqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqliteBusy {
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return fmt.Errorf("sqlite: %w", err)
}
