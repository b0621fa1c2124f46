// Package testenv gives txbox's tests the real local services described in
// docs/testing.md ("The services"): PostgreSQL, MariaDB, Redis, RabbitMQ
// and NATS JetStream on loopback. Each helper hands out an isolated namespace (a
// schema, a database, a stream or queue name) so tests run in parallel and
// never depend on what an earlier run left behind.
//
// A missing service fails the test; it never skips. `make test` starts the
// services first (scripts/services.sh).
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Addresses of the local services. Each can be overridden by the
// environment variable named in its comment.
var (
	// PostgresURL: TXBOX_TEST_POSTGRES_URL.
	PostgresURL = env("TXBOX_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	// MySQLDSN (go-sql-driver format, no database): TXBOX_TEST_MYSQL_DSN.
	MySQLDSN = env("TXBOX_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/")
	// RedisAddr: TXBOX_TEST_REDIS_ADDR.
	RedisAddr = env("TXBOX_TEST_REDIS_ADDR", "127.0.0.1:6379")
	// RabbitURL: TXBOX_TEST_RABBITMQ_URL.
	RabbitURL = env("TXBOX_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
	// NATSURL: TXBOX_TEST_NATS_URL.
	NATSURL = env("TXBOX_TEST_NATS_URL", "nats://127.0.0.1:4222")
)

// PostgresAddr is the host:port of PostgresURL: the server a test checks
// with RequireTCP, or puts a proxy in front of. With
// TXBOX_TEST_POSTGRES_URL naming a server of the version matrix (make
// pg-matrix), it is that server's.
var PostgresAddr = urlAddr(PostgresURL, "5432")

// urlAddr returns the host:port of the URL raw, port def when it names
// none.
func urlAddr(raw, def string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		panic(fmt.Sprintf("testenv: %q: want a postgres:// URL with a host", raw))
	}
	port := u.Port()
	if port == "" {
		port = def
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// RequireTCP fails the test unless addr (host:port) accepts a connection.
func RequireTCP(t testing.TB, service, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatalf("testenv: %s is not reachable at %s (%v); run scripts/services.sh", service, addr, err)
	}
	c.Close()
}

// UniqueName returns prefix followed by 12 random hex characters: a valid
// identifier for a schema, database, stream, queue or subject.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b)
}

// PostgresSchema creates a fresh schema on the local PostgreSQL and drops
// it (cascade) when the test ends. It returns the schema name.
func PostgresSchema(t testing.TB, db *sql.DB) string {
	t.Helper()
	name := UniqueName("t_")
	if _, err := db.ExecContext(context.Background(), `CREATE SCHEMA `+name); err != nil {
		t.Fatalf("testenv: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+name+` CASCADE`)
	})
	return name
}

// PostgresURLWithSchema returns PostgresURL with search_path set to schema.
func PostgresURLWithSchema(schema string) string {
	sep := "?"
	if strings.Contains(PostgresURL, "?") {
		sep = "&"
	}
	return PostgresURL + sep + "search_path=" + schema
}

// MySQLDatabase creates a fresh database on the local MariaDB, drops it when
// the test ends, and returns a DSN that selects it (parseTime and the
// given extra parameters appended).
func MySQLDatabase(t testing.TB, open func(dsn string) (*sql.DB, error), params string) (name, dsn string) {
	t.Helper()
	RequireTCP(t, "MariaDB", "127.0.0.1:3306")
	admin, err := open(MySQLDSN)
	if err != nil {
		t.Fatalf("testenv: open mysql: %v", err)
	}
	defer admin.Close()
	name = UniqueName("t_")
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		a, err := open(MySQLDSN)
		if err != nil {
			return
		}
		defer a.Close()
		_, _ = a.Exec("DROP DATABASE IF EXISTS " + name)
	})
	q := "parseTime=true"
	if params != "" {
		q += "&" + params
	}
	return name, fmt.Sprintf("%s%s?%s", MySQLDSN, name, q)
}

// Chaos reports whether the long or cluster-wide runs of make chaos are
// on (TXBOX_CHAOS set). When they are not, it logs why the test does
// nothing and the caller returns: the test passes having run nothing, and
// is not reported as skipped, since the default run did not miss a
// service, it chose not to run this.
func Chaos(t testing.TB, why string) bool {
	t.Helper()
	if os.Getenv("TXBOX_CHAOS") == "" {
		t.Logf("%s: set TXBOX_CHAOS=1 (make chaos) to run it", why)
		return false
	}
	return true
}

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test naming what it waited for when timeout passes first. Tests wait on
// a condition with a deadline, never on a fixed sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitForEvery(t, timeout, 5*time.Millisecond, what, cond)
}

// WaitForEvery is WaitFor polling every interval: longer for a condition
// that is costly to check (a query over a whole table, a read of a whole
// stream), or that stands for a pace of its own (the relay's probe of a
// paused destination).
func WaitForEvery(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(interval) // polling a condition with a deadline
	}
}

// Within reports whether cond held within d, polling every interval, and
// never fails the test: for a test that samples or that decides what to
// check next from whether progress came in time.
func Within(d, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval) // sampling a condition until a deadline
	}
	return true
}
