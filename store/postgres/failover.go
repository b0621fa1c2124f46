package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// Following the primary across a failover (docs/operations.md,
// "Database failover").
//
// When the primary dies, every connection of the pool is dead, but pgx
// learns that only when it uses one: the relay's retries would fail once
// per pooled connection, each after a longer back-off (measured: a 6.5s
// stall of WAL mode). So the first error that says the connection was
// lost resets the pool (pgxpool.Pool.Reset: idle connections close at
// once, those in use close when released) and marks the loss; further
// losses before the database is back do nothing more. The next call
// dials afresh, and a multi-host DSN with target_session_attrs=read-write
// finds the new primary. A probe (connWatch.probe) dials until a server
// that takes writes answers, and logs which one.

// SQLSTATEs and classes of a lost connection, or of a server that cannot
// take writes.
const (
	// Class 08, connection exception: the connection failed or broke.
	classConnectionException = "08"
	// admin_shutdown (a shutdown, pg_terminate_backend),
	// crash_shutdown (another backend crashed), cannot_connect_now
	// (starting up, shutting down, in recovery).
	codeAdminShutdown    = "57P01"
	codeCrashShutdown    = "57P02"
	codeCannotConnectNow = "57P03"
	// read_only_sql_transaction: the server is a standby, or a demoted
	// primary.
	codeReadOnlyTransaction = "25006"
)

// lostCode reports whether a server's SQLSTATE says the connection is
// lost or the server cannot take writes.
func lostCode(code string) bool {
	switch code {
	case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeReadOnlyTransaction:
		return true
	}
	return len(code) == 5 && code[:2] == classConnectionException
}

// connectionLost reports whether err says that the connection to the
// database was lost or reached a server that cannot take writes: a lost
// SQLSTATE (lostCode), a network error, an EOF, a connection pgx had
// already closed, or a connection attempt that failed for such a reason
// (the server is down, starting, or read-only for
// target_session_attrs=read-write). A context's end is not a loss (the
// caller gave up), nor is a connection refused for its credentials or
// its database: dialing again soon would not help.
func connectionLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return connectLost(ce)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return lostCode(pe.Code)
	}
	return brokenLink(err)
}

// brokenLink reports whether err is a failure of the link itself.
func brokenLink(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed)
}

// connectLost reports whether a failed connection attempt failed because
// no server that takes writes answered. The attempt joins the errors of
// every host it tried: one that refused the credentials or the database
// (a PgError with another code) makes it a configuration error.
func connectLost(ce *pgconn.ConnectError) bool {
	lost, refused := false, false
	walkErrors(ce.Unwrap(), func(err error) {
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe):
			if lostCode(pe.Code) {
				lost = true
			} else {
				refused = true
			}
		case errors.Is(err, pgconn.ErrReadOnlyConnection), errors.Is(err, pgconn.ErrStandbyConnection), brokenLink(err):
			lost = true
		}
	})
	return lost && !refused
}

// walkErrors calls f with each leaf of err's tree of joined errors (an
// error that wraps one error is not split).
func walkErrors(err error, f func(error)) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			walkErrors(e, f)
		}
		return
	}
	f(err)
}

// lostErr wraps err with store.ErrConnectionLost when it says the
// connection was lost (connectionLost).
func lostErr(err error) error {
	if !connectionLost(err) || errors.Is(err, store.ErrConnectionLost) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrConnectionLost, err)
}

// translate is the package's translate, then the driver's reaction to a
// lost connection (seen).
func (d *Driver) translate(op string, err error) error {
	return d.seen(translate(op, err))
}

// seen resets the pool when err matches store.ErrConnectionLost and the
// driver had not noticed the loss yet. It returns err.
func (d *Driver) seen(err error) error {
	if err != nil && errors.Is(err, store.ErrConnectionLost) {
		d.watch.lost(err)
	}
	return err
}

// Waits of the probe between its connection attempts after a loss, and
// the bound of one attempt: a host that drops packets would otherwise
// hold an attempt for as long as the kernel tries to connect.
var probeBackoff = backoff.Policy{Initial: 50 * time.Millisecond, Multiplier: 2, Max: 500 * time.Millisecond}

const probeTimeout = 10 * time.Second

// errReadOnly is the probe's error when the server it reached cannot take
// writes (a DSN without target_session_attrs=read-write).
var errReadOnly = errors.New("the server is read-only (a standby)")

// connWatch notices that the database was lost, resets the pool once per
// loss, and finds the database again.
type connWatch struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu sync.Mutex
	// lostAt is when the current loss was noticed; zero while the
	// database is reachable.
	lostAt time.Time
	// resets counts the pool's resets.
	resets int
	// closed is set by close: no probe starts any more.
	closed bool
	stop   context.CancelFunc
	ctx    context.Context
	probes sync.WaitGroup
}

func newConnWatch(pool *pgxpool.Pool, log *slog.Logger) *connWatch {
	ctx, stop := context.WithCancel(context.Background())
	return &connWatch{pool: pool, log: log, ctx: ctx, stop: stop}
}

// lost handles an error that lost the connection: the first since the
// database was last reachable resets the pool, logs, and starts the
// probe; later ones do nothing.
func (w *connWatch) lost(err error) {
	w.mu.Lock()
	if !w.lostAt.IsZero() || w.closed {
		w.mu.Unlock()
		return
	}
	w.lostAt = time.Now()
	w.resets++
	w.pool.Reset()
	w.probes.Add(1)
	w.mu.Unlock()
	// pgconn's errors name hosts, users and databases, never a password.
	w.log.Warn("database connection lost; dropped the pooled connections, reconnecting", slog.Any("error", err))
	go w.probe()
}

// probe connects until a server that takes writes answers, then logs it
// and ends the loss. It gives up when the pool or the driver closes.
func (w *connWatch) probe() {
	defer w.probes.Done()
	waits := backoff.Streak{Policy: probeBackoff}
	var last error
	for {
		host, err := w.reach()
		if err == nil {
			w.mu.Lock()
			down := time.Since(w.lostAt)
			w.lostAt = time.Time{}
			w.mu.Unlock()
			w.log.Info("database reachable again", slog.String("host", host), slog.Duration("down_for", down))
			return
		}
		if errors.Is(err, puddle.ErrClosedPool) || w.ctx.Err() != nil {
			return
		}
		if last == nil || err.Error() != last.Error() {
			w.log.Debug("database still unreachable", slog.Any("error", err))
		}
		last = err
		t := time.NewTimer(waits.Next())
		select {
		case <-w.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reach takes a connection from the pool (a fresh one: the pool was
// reset) and checks that its server takes writes. It returns the
// server's address. A read-only server's connection is closed, so that
// no call uses it.
func (w *connWatch) reach() (string, error) {
	ctx, cancel := context.WithTimeout(w.ctx, probeTimeout)
	defer cancel()
	c, err := w.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	var readOnly string
	if err := c.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly); err != nil {
		c.Release()
		return "", err
	}
	host := serverAddr(c.Conn())
	if readOnly == "on" {
		_ = c.Hijack().Close(ctx)
		return "", fmt.Errorf("%s: %w", host, errReadOnly)
	}
	c.Release()
	return host, nil
}

// serverAddr is the address of the server conn reached: with a multi-host
// DSN, the host that answered (pgconn keeps the first host of the DSN in
// the connection's config, whichever answered).
func serverAddr(conn *pgx.Conn) string {
	if a := conn.PgConn().Conn().RemoteAddr(); a != nil && a.String() != "" {
		return a.String()
	}
	// A Unix socket names no peer: its directory.
	return conn.Config().Host
}

// close stops the probe, if one runs, and waits for it.
func (w *connWatch) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.stop()
	w.probes.Wait()
}

// resetCount is how many times the pool was reset.
func (w *connWatch) resetCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resets
}
