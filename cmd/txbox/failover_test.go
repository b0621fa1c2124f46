package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/pgcluster"
	"github.com/txbox/txbox/internal/testenv"
)

// TestFailoverSlotCommands: on a PostgreSQL 17 primary with a standby set
// up for failover slots, both in a multi-host DSN, `txbox migrate` makes a
// failover slot and says it is safe, and so do `txbox status` and `txbox
// config check --connect`. With synchronized_standby_slots unset on the
// primary they say UNSAFE and why: config check passes with the warning,
// and `migrate --require-failover-safe` fails.
func TestFailoverSlotCommands(t *testing.T) {
	t.Parallel()
	p := pgcluster.Start(t, pgcluster.V17, pgcluster.Options{})
	s := pgcluster.AddStandby(t, p, pgcluster.StandbyOptions{Synchronous: true, FailoverSlots: true})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("a command sent a webhook request")
	}))
	t.Cleanup(hook.Close)
	cfg := filepath.Join(t.TempDir(), "txbox.yaml")
	yml := "database: { dialect: postgres, source: wal }\nsenders:\n  h: { type: webhook, url: \"" + hook.URL + "\" }\ndefaults: { sender: h }\n"
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	dsn := pgcluster.MultiHostDSN("test", s, p)
	run := func(wantCode int, args ...string) string {
		t.Helper()
		code, out, errOut := runInProcess(t, nil, append(args, "--config", cfg, "--dsn", dsn)...)
		if code != wantCode {
			t.Fatalf("txbox %s: code %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, out, errOut)
		}
		return out
	}
	contains := func(what, out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in:\n%s", what, w, out)
			}
		}
	}

	start := time.Now()
	out := run(exitOK, "migrate")
	t.Logf("migrate took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	contains("migrate", out, "WAL mode: created the slot txbox_slot with failover = true",
		"WAL mode: failover: safe: a failover slot, synced and persistent on standby1 (slot standby1_slot)")
	if strings.Contains(out, "warning:") {
		t.Errorf("migrate warned:\n%s", out)
	}
	contains("status", run(exitOK, "status"), "WAL slot failover: safe: ")
	contains("config check", run(exitOK, "config", "check", "--connect"), "source: wal: failover: safe: ", "all checks passed\n")

	p.Exec(t, "postgres", `ALTER SYSTEM SET synchronized_standby_slots = ''`)
	p.Exec(t, "postgres", `SELECT pg_reload_conf()`)
	testenv.WaitFor(t, 10*time.Second, "synchronized_standby_slots unset", func() bool {
		var v string
		p.QueryRow(t, "postgres", `SELECT current_setting('synchronized_standby_slots')`, nil, &v)
		return v == ""
	})
	const why = "UNSAFE: synchronized_standby_slots is not set on the primary"
	contains("status, unsafe", run(exitOK, "status"), "WAL slot failover: "+why)
	contains("config check, unsafe", run(exitOK, "config", "check", "--connect"), "source: wal: failover: "+why,
		"warning: the WAL slot is not shown to survive a failover (unsafe)", "all checks passed, with 1 warning(s)")
	contains("migrate --require-failover-safe", run(exitFailure, "migrate", "--require-failover-safe"),
		"warning: the slot is not yet failover-safe (unsafe): synchronized_standby_slots is not set")
}
