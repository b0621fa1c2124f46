package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/txbox/txbox/internal/testenv/pgdrop"
)

// PostgresDatabase creates a fresh database on the local PostgreSQL
// through admin, and drops it when the test ends, its replication slots
// and their walsenders first (pgdrop.DropDatabase): a slot would make
// DROP DATABASE fail and leave the database, and the slot pinning WAL,
// behind. It returns the name and a URL that selects it.
func PostgresDatabase(t testing.TB, admin *sql.DB) (name, dbURL string) {
	t.Helper()
	name = UniqueName("t_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		if err := pgdrop.DropDatabase(context.Background(), pgdrop.DB(admin), name); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return name, PostgresURLWithDatabase(name)
}

// PostgresURLWithDatabase returns PostgresURL with its database replaced
// by name.
func PostgresURLWithDatabase(name string) string {
	u, err := url.Parse(PostgresURL)
	if err != nil {
		panic(fmt.Sprintf("testenv: TXBOX_TEST_POSTGRES_URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

// PostgresWalsender opens a replication connection to the database of
// dbURL and starts streaming slot with START_REPLICATION (options, if not
// empty, is the option list, parentheses included), so that the slot is
// active; it returns the walsender's pid. The connection is closed when
// the test ends; nothing reads the stream.
func PostgresWalsender(t testing.TB, dbURL, slot, options string) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: replication connection: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(c)
	})
	conn.Frontend().Send(&pgproto3.Query{String: "START_REPLICATION SLOT " + slot + " LOGICAL 0/0 " + options})
	if err := conn.Frontend().Flush(); err != nil {
		t.Fatalf("testenv: START_REPLICATION: %v", err)
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("testenv: START_REPLICATION: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			return conn.PID()
		case *pgproto3.ErrorResponse:
			t.Fatalf("testenv: START_REPLICATION: %s", m.Message)
		}
	}
}
