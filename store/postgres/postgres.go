package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/pertype"
)

// Dialect is the name returned by [Driver.Dialect].
const Dialect = "postgres"

// Config configures a [Driver].
type Config struct {
	// Schema holds txbox's tables. Migrate creates it when missing.
	// Defaults to "" (unqualified names, resolved through the connection's
	// search_path).
	Schema string
	// TablePrefix starts every table name. Defaults to
	// store.DefaultTablePrefix ("txbox_").
	TablePrefix string
	// Logger receives the driver's own diagnostics: listener reconnects,
	// a lost connection (WARN) and the database reachable again (INFO,
	// with the host that answered). Defaults to slog.Default().
	Logger *slog.Logger

	// ClaimLookback bounds the claim's index scan from below at the
	// latest due time this driver claimed for the type, minus this
	// lookback. Each claim leaves dead index entries behind it; vacuum
	// removes them, but not while another session's transaction pins the
	// xmin horizon, and then a claim that scans from the start of the
	// index wades through every row claimed since (measured: the drain
	// rate of a 100k backlog fell 3.5x with one open REPEATABLE READ
	// transaction). The lookback catches rows of transactions that
	// committed out of order; a row from a transaction open longer than
	// this is claimed at the next full scan (see ClaimRescanInterval).
	// Ordered-by-key claims always scan in full. Negative disables the
	// bound. Defaults to DefaultClaimLookback (1s).
	ClaimLookback time.Duration

	// ClaimRescanInterval is how often a claim scans the whole due range
	// regardless of ClaimLookback; a claim that comes back empty also
	// makes the next one scan in full. It is the longest extra delay of a
	// row whose transaction stayed open longer than ClaimLookback.
	// Defaults to DefaultClaimRescanInterval (5s).
	ClaimRescanInterval time.Duration

	// NotifyTrigger makes Migrate create the outbox's wake-up trigger (if
	// it is missing): after each INSERT or COPY statement into the outbox
	// it sends one notification per distinct event type of the statement
	// on NotifyChannel, so relays pick up rows that producers insert with
	// plain SQL at once instead of at their next poll. txbox's own
	// publisher notifies without it. Migrate never drops the trigger;
	// docs/schema/postgres.md, "Wake-ups for plain-SQL producers", says
	// how to. Off by default: the trigger costs every insert statement a
	// transition table and a function call.
	NotifyTrigger bool

	// Source is where the relay reads events: SourceTable (the default)
	// or SourceWAL. With SourceWAL the driver's OutboxInsert emits each
	// event into the WAL instead of inserting a row, and the driver is a
	// store.Streamer.
	Source string
	// WAL configures SourceWAL.
	WAL WALConfig
}

// Defaults of Config's claim window.
const (
	DefaultClaimLookback       = time.Second
	DefaultClaimRescanInterval = 5 * time.Second
)

// Driver is the PostgreSQL implementation of store.Driver and store.Waker.
// It is safe for concurrent use.
type Driver struct {
	pool    *pgxpool.Pool
	tables  store.Tables
	prefix  string
	logger  *slog.Logger
	channel string
	q       queries
	// spill holds the statements of WAL mode's spill (stream_spill.go).
	spill spillQueries
	// fanout holds the statements of fan-out routes (fanout.go).
	fanout fanoutQueries
	// copyTable is the outbox table for COPY, which takes an identifier
	// rather than SQL text.
	copyTable pgx.Identifier

	source string
	wal    WALConfig

	lookback, rescan time.Duration
	notifyTrigger    bool
	cursors          pertype.Map[claimCursor]
	ordered          pertype.Map[orderedCursor]
	orderedSQLMu     sync.Mutex
	orderedSQL       map[orderedKey]string
	// watch resets the pool when the connection is lost (failover.go).
	watch *connWatch
}

var (
	_ store.Driver     = (*Driver)(nil)
	_ store.Waker      = (*Driver)(nil)
	_ store.ReadyWaker = (*Driver)(nil)
)

// New returns a driver on pool. It validates Schema and TablePrefix before
// any SQL is built, so a hostile name is rejected with an error matching
// txbox.ErrInvalidIdentifier and never reaches the database. New does not
// touch the database; call Migrate to create the tables.
func New(pool *pgxpool.Pool, cfg Config) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("postgres: New: pool is nil")
	}
	tables, err := store.NewTables(cfg.Schema, cfg.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	prefix := cfg.TablePrefix
	if prefix == "" {
		prefix = store.DefaultTablePrefix
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.ClaimLookback == 0 {
		cfg.ClaimLookback = DefaultClaimLookback
	}
	if cfg.ClaimRescanInterval == 0 {
		cfg.ClaimRescanInterval = DefaultClaimRescanInterval
	}
	if cfg.ClaimRescanInterval < 0 {
		return nil, fmt.Errorf("postgres: ClaimRescanInterval %s must not be negative", cfg.ClaimRescanInterval)
	}
	switch cfg.Source {
	case "":
		cfg.Source = SourceTable
	case SourceTable, SourceWAL:
	default:
		return nil, fmt.Errorf("postgres: Source %q is neither %q nor %q", cfg.Source, SourceTable, SourceWAL)
	}
	wal, err := cfg.WAL.withDefaults(tables, prefix)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		source:        cfg.Source,
		wal:           wal,
		lookback:      cfg.ClaimLookback,
		rescan:        cfg.ClaimRescanInterval,
		notifyTrigger: cfg.NotifyTrigger,
		pool:          pool,
		tables:        tables,
		prefix:        prefix,
		logger:        logger,
		channel:       channelName(tables),
		watch:         newConnWatch(pool, logger),
	}
	d.q = buildQueries(d)
	d.spill = buildSpillQueries(d)
	d.fanout = buildFanoutQueries(d)
	d.copyTable = pgx.Identifier{tables.Outbox}
	if tables.Schema != "" {
		d.copyTable = pgx.Identifier{tables.Schema, tables.Outbox}
	}
	return d, nil
}

// Dialect returns "postgres".
func (d *Driver) Dialect() string { return Dialect }

// Close stops the driver's reconnect probe, which runs after a lost
// connection until the database answers again (it also ends when the
// pool closes). The pool belongs to the caller: Close leaves it open.
func (d *Driver) Close() error {
	d.watch.close()
	return nil
}

// Pool returns the pool the driver was built on.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// MaxConns is the size of the driver's pool. The relay leaves part of it
// to everything but the lock claims (relay.Config.LockBudget).
func (d *Driver) MaxConns() int { return int(d.pool.Config().MaxConns) }

// Tables returns the validated table names.
func (d *Driver) Tables() store.Tables { return d.tables }

// NotifyChannel is the LISTEN/NOTIFY channel the driver publishes wake-ups
// on: "<prefix>outbox", qualified by the schema when one is configured, or
// a hash of that when it would exceed PostgreSQL's 63-byte limit.
func (d *Driver) NotifyChannel() string { return d.channel }

// table returns the quoted, schema-qualified name of one of txbox's tables.
func (d *Driver) table(name string) string {
	if d.tables.Schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{d.tables.Schema, name}.Sanitize()
}

func channelName(t store.Tables) string {
	name := t.Outbox
	if t.Schema != "" {
		name = t.Schema + "." + t.Outbox
	}
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "txbox_" + hex.EncodeToString(sum[:16])
}

// ORMTx is the method set txbox accepts from ORM transactions (sqlx.Tx,
// bun.Tx, ...) besides pgx.Tx and *sql.Tx. The Commit method is what tells
// a transaction from a *sql.DB, which also has ExecContext but would
// autocommit the event on its own.
type ORMTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

type committer interface{ Commit() error }
type ctxCommitter interface{ Commit(context.Context) error }

// txExec runs statements inside a caller's transaction. Native pgx
// transactions get binary array parameters; database/sql and ORM
// transactions get PostgreSQL text literals, which every driver can bind as
// plain text (the SQL then casts them).
type txExec struct {
	pgx pgx.Tx
	std ORMTx
}

func (t txExec) native() bool { return t.pgx != nil }

func (t txExec) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if t.pgx != nil {
		tag, err := t.pgx.Exec(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		return tag.RowsAffected(), nil
	}
	res, err := t.std.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, nil // some drivers cannot say; the statement still ran
	}
	return n, nil
}

// adaptTx classifies the caller's transaction value.
func adaptTx(tx any) (txExec, error) {
	switch v := tx.(type) {
	case nil:
		return txExec{}, txbox.ErrNoTransaction
	case pgx.Tx:
		if isNilPtr(v) {
			return txExec{}, txbox.ErrNoTransaction
		}
		return txExec{pgx: v}, nil
	case *sql.Tx:
		if v == nil {
			return txExec{}, txbox.ErrNoTransaction
		}
		return txExec{std: v}, nil
	case *sql.DB, *sql.Conn, *pgxpool.Pool, *pgx.Conn, *pgxpool.Conn, *pgconn.PgConn:
		return txExec{}, txbox.ErrNoTransaction
	}
	if e, ok := tx.(ORMTx); ok && !isNilPtr(tx) {
		_, c1 := tx.(committer)
		_, c2 := tx.(ctxCommitter)
		if c1 || c2 {
			return txExec{std: e}, nil
		}
		return txExec{}, fmt.Errorf("postgres: %T has ExecContext but no Commit method, so it is not a transaction: %w", tx, txbox.ErrNoTransaction)
	}
	if isNilPtr(tx) {
		return txExec{}, txbox.ErrNoTransaction
	}
	return txExec{}, &txbox.UnsupportedTxError{Dialect: Dialect, Type: fmt.Sprintf("%T", tx)}
}

func isNilPtr(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// SQLSTATEs translate maps. Undefined table, schema or function: the
// tables are missing.
const (
	codeUndefinedTable  = "42P01"
	codeUndefinedSchema = "3F000"
	codeUniqueViolation = "23505"
	codeDeadlock        = "40P01"
	codeSerialization   = "40001"
	// An emit's function is missing (schema before version 6), or the
	// emit check found no slot (with constraint txbox_wal_check).
	codeUndefinedFunction = "42883"
	codeUndefinedObject   = "42704"
	// SQLSTATE classes of errors about the data itself: data exception
	// (a value the column cannot store: invalid UTF-8, a NUL in text,
	// \u0000 in jsonb, out of range), integrity constraint violation
	// (CHECK, NOT NULL, foreign key; a unique violation is
	// ErrDuplicateID) and program limit exceeded (a key too long for
	// the key-order index's row, 54000; a statement too large, 54001:
	// fewer items at once fit).
	classDataException       = "22"
	classIntegrityConstraint = "23"
	classProgramLimit        = "54"
)

// ErrNotMigrated is returned (wrapped) when txbox's tables do not exist:
// run Migrate or `txbox migrate` first.
var ErrNotMigrated = errors.New("postgres: txbox tables are missing; run migrations first")

// ErrDuplicateID is returned (wrapped) when a published event's id already
// exists in the outbox.
var ErrDuplicateID = errors.New("postgres: an event with this id already exists")

// translate wraps a driver error with the operation and maps the cases
// callers act on to txbox or package sentinels, keeping the *pgconn.PgError
// reachable through errors.As: missing tables (ErrNotMigrated), a
// duplicate id (ErrDuplicateID), a deadlock or serialization failure
// (store.ErrTxConflict), any other data exception or integrity
// constraint violation or program limit exceeded, classes 22, 23 and 54
// (store.ErrDataRefused: the same data fails the same way again), the emit check's errors
// (*SlotError), and a lost connection or a read-only server
// (store.ErrConnectionLost, see connectionLost). The Driver's method of
// the same name also resets the pool on a lost connection.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("postgres: %s: %w", op, txbox.ErrNotFound)
	}
	if connectionLost(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, store.ErrConnectionLost, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if se := slotError(op, pe); se != nil {
			return se
		}
		switch pe.Code {
		case codeUndefinedTable, codeUndefinedSchema, codeUndefinedFunction:
			return fmt.Errorf("%w (%s: %w)", ErrNotMigrated, op, err)
		case codeUniqueViolation:
			return fmt.Errorf("%w (%s: %w)", ErrDuplicateID, op, err)
		case codeDeadlock, codeSerialization:
			return fmt.Errorf("postgres: %s: %w: %w", op, store.ErrTxConflict, err)
		}
		if class := pe.Code[:min(2, len(pe.Code))]; class == classDataException || class == classIntegrityConstraint || class == classProgramLimit {
			return fmt.Errorf("postgres: %s: %w: %w", op, store.ErrDataRefused, err)
		}
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}
