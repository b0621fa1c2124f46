package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
)

// TestConnectionLostCodes: which server errors say the connection is lost
// or the server cannot take writes, and which do not.
func TestConnectionLostCodes(t *testing.T) {
	t.Parallel()
	cases := map[string]bool{
		"57P01": true,  // admin_shutdown: a shutdown, pg_terminate_backend
		"57P02": true,  // crash_shutdown
		"57P03": true,  // cannot_connect_now: starting, in recovery
		"08006": true,  // connection_failure
		"08001": true,  // sqlclient_unable_to_establish_sqlconnection
		"08P01": true,  // protocol_violation
		"25006": true,  // read_only_sql_transaction: a standby
		"57014": false, // query_canceled: our own timeout
		"57P04": false, // database_dropped: no retry finds it
		"25001": false, // active_sql_transaction
		"23505": false,
		"40001": false,
		"42P01": false,
		"28P01": false, // invalid_password
		"08":    false, // malformed
		"":      false,
	}
	for code, want := range cases {
		pe := &pgconn.PgError{Code: code, Message: "server says " + code}
		if got := connectionLost(fmt.Errorf("wrapped: %w", pe)); got != want {
			t.Errorf("%q: connectionLost = %v, want %v", code, got, want)
		}
		err := translate("op", pe)
		if errors.Is(err, store.ErrConnectionLost) != want {
			t.Errorf("%q: translate gave %v", code, err)
		}
		var got *pgconn.PgError
		if !errors.As(err, &got) || got != pe {
			t.Errorf("%q: translate lost the server's error: %v", code, err)
		}
	}
}

// TestConnectionLostErrors: the client side's errors of a broken link are
// losses; an ended context and other errors are not.
func TestConnectionLostErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"EOF", fmt.Errorf("failed to receive message: %w", io.EOF), true},
		{"unexpected EOF", fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{"closed", fmt.Errorf("x: %w", net.ErrClosed), true},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"no rows", pgx.ErrNoRows, false},
		{"other", errors.New("conn busy"), false},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := connectionLost(c.err); got != c.want {
			t.Errorf("%s: connectionLost(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if err := translate("claim", io.ErrUnexpectedEOF); !errors.Is(err, store.ErrConnectionLost) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("translate: %v", err)
	}
	if err := translate("claim", context.DeadlineExceeded); errors.Is(err, store.ErrConnectionLost) {
		t.Errorf("translate: %v", err)
	}
	if err := lostErr(lostErr(io.EOF)); err.Error() != store.ErrConnectionLost.Error()+": EOF" {
		t.Errorf("lostErr wrapped twice: %v", err)
	}
}

// TestConnectionLostReal classifies the errors of real connections and
// connection attempts on the local server: a refused port, a read-only
// server for target_session_attrs=read-write, a terminated session and a
// write in a read-only transaction are losses; a missing database or
// role is a configuration error, even when another host was down.
func TestConnectionLostReal(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refused := closedPort(t)
	base, err := url.Parse(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	dsn := func(hosts, db, user string, query url.Values) string {
		u := *base
		u.Host, u.Path = hosts, "/"+db
		if user != "" {
			u.User = url.User(user)
		}
		q := u.Query()
		for k, v := range query {
			q[k] = v
		}
		q.Set("connect_timeout", "5")
		// pgx reads a "+" as itself, not as a space.
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		return u.String()
	}
	db := base.Path[1:]
	readOnly := url.Values{"target_session_attrs": {"read-write"}, "options": {"-c default_transaction_read_only=on"}}
	connects := []struct {
		name, dsn string
		want      bool
	}{
		{"refused", dsn(refused, db, "", nil), true},
		{"read-only", dsn(base.Host, db, "", readOnly), true},
		{"read-only and refused", dsn(base.Host+","+refused, db, "", readOnly), true},
		{"no database", dsn(base.Host, "txbox_no_such_db", "", nil), false},
		{"no role", dsn(base.Host, db, "txbox_no_such_role", nil), false},
		{"refused, then no database", dsn(refused+","+base.Host, "txbox_no_such_db", "", nil), false},
	}
	for _, c := range connects {
		cfg, err := pgconn.ParseConfig(c.dsn)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err == nil {
			_ = conn.Close(ctx)
			t.Errorf("%s: connected", c.name)
			continue
		}
		if got := connectionLost(err); got != c.want {
			t.Errorf("%s: connectionLost(%v) = %v, want %v", c.name, err, got, c.want)
		}
	}

	// A write in a read-only transaction: what a demoted primary answers.
	conn, err := pgx.Connect(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `CREATE TEMP TABLE txbox_ro (i int)`)
	_ = tx.Rollback(ctx)
	if !connectionLost(err) {
		t.Errorf("a write in a read-only transaction: connectionLost(%v) = false", err)
	}

	// A terminated session: a FATAL 57P01, or the EOF after it.
	victim, err := pgx.Connect(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, victim.PgConn().PID()).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v, %v", ok, err)
	}
	_, err = victim.Exec(ctx, `SELECT 1`)
	if !connectionLost(err) {
		t.Errorf("a terminated session: connectionLost(%v) = false", err)
	}
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestDSNKeptForEveryConnection: the connections the driver opens outside
// the pool (LISTEN, WAL mode's replication connection) keep a multi-host
// DSN's hosts and its target_session_attrs=read-write check.
func TestDSNKeptForEveryConnection(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://u@127.0.0.1:1,127.0.0.1:2/db?sslmode=disable&target_session_attrs=read-write")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d, err := New(pool, Config{})
	if err != nil {
		t.Fatal(err)
	}
	listen := d.pool.Config().ConnConfig.Copy() // as listenOnce
	repl := d.replicationConfig(nil)
	for name, c := range map[string]*pgconn.Config{"listen": &listen.Config, "replication": repl} {
		if len(c.Fallbacks) != 1 || c.Fallbacks[0].Port != 2 || c.ValidateConnect == nil {
			t.Errorf("%s: fallbacks %+v, read-write check %v", name, c.Fallbacks, c.ValidateConnect != nil)
		}
	}
}
