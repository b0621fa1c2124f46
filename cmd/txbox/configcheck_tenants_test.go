package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/testenv"
)

// TestConfigCheckTenants: config check lists each tenant of the list with
// where its tables are and its share of database.max-conns, and says
// tenants-query was not run; with --connect it runs the query, connects
// to each tenant's database and names the tenant whose schema does not
// exist yet, failing the check.
func TestConfigCheckTenants(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := testenv.UniqueName("t_")
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA %s; CREATE TABLE %s.tenants (name text, schema text);
INSERT INTO %s.tenants VALUES ('fromquery', '%s')`, schema, schema, schema, schema)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	missing := schema + "_missing"
	p := t.TempDir() + "/txbox.yaml"
	y := fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, max-conns: 12 }
tenants:
  - { name: acme, dsn-env: ACME_DATABASE_URL }
  - { name: globex, schema: %s, max-conns: 3 }
  - { name: initech, schema: %s }
tenants-query: "SELECT name, schema FROM %s.tenants"
`, testenv.PostgresURL, schema, missing, schema)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, nil, "config", "check", "--config", p)
	if code != exitOK {
		t.Fatalf("check: code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range [][]string{
		{"TENANT", "TABLES", "MAX-CONNS", "STATUS"},
		{"acme", "database from dsn-env ACME_DATABASE_URL", " 4 ", "not checked (use --connect)"},
		{"globex", "schema " + schema + " in database.dsn", " 3 ", "not checked"},
		{"initech", "schema " + missing + " in database.dsn", " 4 ", "not checked"},
		{"not verified: tenants-query (run with --connect)"},
	} {
		if lineOf(out, want...) == "" {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}

	env := []string{"ACME_DATABASE_URL=" + testenv.PostgresURL}
	code, out, errOut = runInProcess(t, env, "config", "check", "--config", p, "--connect", "--timeout", "10s")
	if code != exitFailure || !strings.Contains(errOut, "1 tenant(s) failed") {
		t.Fatalf("check --connect: code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range [][]string{
		// Four tenants with the query's: 12 / 4 = 3 each.
		{"acme", "database from dsn-env ACME_DATABASE_URL", " 3 ", "ok: connected"},
		{"fromquery", "schema " + schema + " in database.dsn", " 3 ", "ok: connected"},
		{"globex", "ok: connected"},
		{"initech", fmt.Sprintf(`ERROR: tenants[2].schema: schema %q does not exist (run txbox migrate)`, missing)},
	} {
		if lineOf(out, want...) == "" {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not verified: tenants-query") {
		t.Errorf("--connect says the query was not run:\n%s", out)
	}

	// A share below what the lock claims need is warned of.
	lp := t.TempDir() + "/lock.yaml"
	ly := fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, max-conns: 8 }
senders: { n: { type: nats } }
defaults: { route: { subject: "x.{event_type}" } }
tenants:
  - { name: a, schema: a1 }
  - { name: b, schema: b1, max-conns: 4 }
`, testenv.PostgresURL)
	if err := os.WriteFile(lp, []byte(ly), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runInProcess(t, nil, "config", "check", "--config", lp)
	if code != exitOK || lineOf(out, "warning: tenant a: a pool of 4 connections is below the") == "" || lineOf(out, "warning: tenant b:") == "" {
		t.Fatalf("check of a lock-claim config with small shares: code %d\n%s\n%s", code, out, errOut)
	}
}
