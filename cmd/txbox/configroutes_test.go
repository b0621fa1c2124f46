package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
)

// TestConfigCheckWarnsOfRemovedRoutes: with --connect, config check names
// the pending deliveries of a fan-out route the file no longer has.
func TestConfigCheckWarnsOfRemovedRoutes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "t.db")
	if code, _, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	ctx := context.Background()
	d, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := []*txbox.Event{{ID: txbox.NewID(), Type: "orders", Payload: []byte("{}")}, {ID: txbox.NewID(), Type: "orders", Payload: []byte("{}")}}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.OutboxExpand(ctx, &store.OutboxExpandParams{EventType: "orders", Routes: []string{"a", "gone"}, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "txbox.yaml")
	yml := fmt.Sprintf(`database: { dsn: %q }
senders:
  a: { type: webhook, url: "http://127.0.0.1:1/a" }
  b: { type: webhook, url: "http://127.0.0.1:1/b" }
defaults: { sender: a }
events:
  orders:
    routes: [{ sender: a }, { sender: b }]
`, db)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out, errOut := runInProcess(t, nil, "config", "check", "--config", cfg, "--connect", "--timeout", "2s")
	want := `events.orders: 2 pending deliveries of route "gone", which the configuration no longer has`
	if !strings.Contains(out, want) {
		t.Fatalf("config check --connect said:\n%s\n%s\nwant a warning containing %q", out, errOut, want)
	}
	if strings.Contains(out, `route "a"`) {
		t.Errorf("config check warned of the configured route a:\n%s", out)
	}
}
