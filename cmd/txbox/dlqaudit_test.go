package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
)

func mysqlSeeded(t *testing.T) seeded {
	_, dsn := storeharness.MySQLDatabase(t)
	d, err := mysql.Open(dsn, mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return seeded{d: d, yaml: fmt.Sprintf("database: { dialect: mysql, dsn: %q }\n", dsn),
		begin: func(t *testing.T) (any, func() error) {
			tx, err := d.DB().BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx, tx.Commit
		}}
}

// TestDLQAudit runs `txbox dlq retry|resolve|delete` on PostgreSQL,
// MariaDB and SQLite and reads the audit trail back with `txbox dlq
// audit`: one entry per change, dry runs included, as cli:<OS user>,
// with the selector, the filter and the counts.
func TestDLQAudit(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) seeded{"sqlite": sqliteSeeded, "postgres": postgresSeeded, "mysql": mysqlSeeded} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testDLQAudit(t, open(t))
		})
	}
}

func testDLQAudit(t *testing.T, s seeded) {
	if err := s.d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfgPath := t.TempDir() + "/txbox.yaml"
	if err := os.WriteFile(cfgPath, []byte(s.yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	dlq := func(args ...string) (int, string, string) {
		return runInProcess(t, []string{"USER=env-user"}, append([]string{"dlq", args[0], "--config", cfgPath}, args[1:]...)...)
	}
	var orders []txbox.ID
	for range 3 {
		ev := &txbox.Event{Type: "orders", Payload: []byte(`{}`)}
		s.insert(t, ev)
		orders = append(orders, ev.ID)
	}
	s.fail(t, "orders", store.OutcomeFailed, 0, "receiver said 422")
	mail := &txbox.Event{Type: "mail", Payload: []byte(`{}`)}
	s.insert(t, mail)
	s.fail(t, "mail", store.OutcomeFailed, 0, "smtp 550")

	// A dry run, a filtered retry, an ids resolve (one unknown id) and a
	// usage error, which changes nothing and is not recorded.
	for _, args := range [][]string{
		{"retry", "--all", "--type", "orders", "--dry-run"},
		{"retry", "--all", "--type", "orders", "--json"},
		{"resolve", mail.ID.String(), txbox.NewID().String()},
	} {
		if code, out, errOut := dlq(args...); code != exitOK || strings.Contains(errOut, "warning") {
			t.Fatalf("dlq %v: %d %q %q", args, code, out, errOut)
		}
	}
	if code, _, _ := dlq("delete", "--all"); code != exitUsage {
		t.Fatalf("delete --all without a filter: %d, want a usage error", code)
	}

	code, out, errOut := dlq("audit", "--json")
	var got []auditJSON
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("audit --json: %d %q %q", code, out, errOut)
	}
	who := "cli:env-user"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = "cli:" + u.Username
	}
	if len(got) != 3 {
		t.Fatalf("audit: %d entries, want 3: %+v", len(got), got)
	}
	for i, w := range []auditJSON{
		{Action: "resolve", Selector: "ids", Matched: 2, Changed: 1, Filter: `{"ids":["` + mail.ID.String() + `","`},
		{Action: "retry", Selector: "filter", Matched: 3, Changed: 3, Filter: `{"type":"orders","status":"unresolved"}`},
		{Action: "retry", Selector: "filter", DryRun: true, Matched: 3, Changed: 0, Filter: `{"type":"orders","status":"unresolved"}`},
	} {
		g := got[i]
		if g.Who != who || g.Action != w.Action || g.Selector != w.Selector || g.DryRun != w.DryRun || g.Matched != w.Matched ||
			g.Changed != w.Changed || !strings.HasPrefix(g.Filter, w.Filter) || g.Error != "" || g.At.IsZero() || (i > 0 && g.ID >= got[i-1].ID) {
			t.Errorf("entry %d: %+v, want %+v (who %s)", i, g, w, who)
		}
	}
	for _, id := range orders {
		if _, err := s.d.DeadLetterGet(context.Background(), id); err == nil {
			t.Errorf("%s still dead-lettered after the retry", id)
		}
	}

	// --action, --limit and the table.
	code, out, _ = dlq("audit", "--action", "retry", "--limit", "1", "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 || got[0].Action != "retry" || got[0].DryRun {
		t.Errorf("audit --action retry --limit 1: %d %q", code, out)
	}
	code, out, _ = dlq("audit")
	if code != exitOK || !strings.Contains(out, "WHO") || strings.Count(out, who) != 3 || !strings.Contains(out, `{"type":"orders","status":"unresolved"}`) {
		t.Errorf("audit table: %d %q", code, out)
	}
	for _, bad := range [][]string{{"audit", "--limit", "0"}, {"audit", "--action", "Retry"}, {"audit", "extra"}} {
		if code, _, _ := dlq(bad...); code != exitUsage {
			t.Errorf("dlq %v: %d, want a usage error", bad, code)
		}
	}
}

// TestCLIWho: the OS user, else $USER, else unknown.
func TestCLIWho(t *testing.T) {
	t.Parallel()
	w := cliWho(&env{getenv: func(string) string { return "" }})
	if u, err := user.Current(); err == nil && u.Username != "" {
		if w != "cli:"+u.Username {
			t.Errorf("who %q, want cli:%s", w, u.Username)
		}
	} else if w != "cli:unknown" {
		t.Errorf("who %q, want cli:unknown", w)
	}
}

// TestAuditCellIsOneLineOfText: a hostile who or filter cannot move the
// table's columns or send a terminal escape sequence.
func TestAuditCellIsOneLineOfText(t *testing.T) {
	t.Parallel()
	if got := cell("cli:\x1b[31mred\tx\ny\u009b", 80); got != "cli:?[31mred?x y?" {
		t.Errorf("cell = %q", got)
	}
}
