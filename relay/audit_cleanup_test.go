package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// TestCleanupDeletesOldAuditEntries: the cleanup round also deletes audit
// entries older than Cleanup.AuditTTL (left at its default, 90 days) and
// keeps the recent ones.
func TestCleanupDeletesOldAuditEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// One entry written 91 days ago, as the database clock counts.
	if _, err := b.pool.Exec(ctx, "INSERT INTO "+b.schema+".txbox_audit (at, who, action, selector) VALUES (now() - interval '91 days', 'cli:old', 'retry', 'ids')"); err != nil {
		t.Fatal(err)
	}
	recent := &store.AuditEntry{Who: "admin-token", Action: "resolve", Selector: store.AuditSelectorFilter, Filter: `{"type":"orders"}`, Matched: 2, Changed: 2}
	if err := b.store.AuditAppend(ctx, recent); err != nil {
		t.Fatal(err)
	}
	hook := &recordingHook{}
	b.start(t, func(c *relay.Config) { c.Hooks = []txbox.RelayHook{hook} })
	testenv.WaitFor(t, 10*time.Second, "old audit entry cleaned up", func() bool { return b.count(t, "audit", "who = 'cli:old'") == 0 })
	testenv.WaitFor(t, 10*time.Second, "cleanup hook counted it", func() bool { return hook.maintenance(txbox.JobAuditCleanup) >= 1 })
	start := hook.rounds(txbox.JobAuditCleanup)
	testenv.WaitFor(t, 10*time.Second, "two more cleanup rounds", func() bool { return hook.rounds(txbox.JobAuditCleanup) >= start+2 })
	if n := b.count(t, "audit", "id = $1", recent.ID); n != 1 {
		t.Fatal("the recent audit entry was deleted")
	}
	if n := hook.maintenance(txbox.JobAuditCleanup); n != 1 {
		t.Errorf("audit cleanup hook counted %d rows, want 1", n)
	}
}
