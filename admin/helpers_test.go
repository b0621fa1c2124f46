package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/storetest"
)

// Tokens of the tests. They are canaries as well: no log line may contain
// them.
const (
	readToken  = "Canary-read-token-4Kq9xZ"
	adminToken = "Canary-admin-token-7Wm2pL"
)

// bundle is one test's store, handler, server and captured logs.
type bundle struct {
	t     *testing.T
	h     storetest.Harness
	store store.Driver
	admin *admin.Handler
	srv   *httptest.Server
	logs  *testenv.LogBuffer
	ctx   context.Context
}

// dialects are the stores the API tests run on: real PostgreSQL, and
// SQLite for the store parts.
func dialects() map[string]storetest.Harness {
	return map[string]storetest.Harness{"postgres": storeharness.Postgres(), "sqlite": storeharness.SQLite()}
}

func setup(t *testing.T, h storetest.Harness, mod func(*admin.Config)) *bundle {
	t.Helper()
	if !h.SerialWriter {
		testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	d, err := h.Open(t, h.NewNamespace(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	cfg := admin.Config{
		Store: d, ReadToken: readToken, AdminToken: adminToken,
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		StatsTTL: time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if s := logs.String(); strings.Contains(s, readToken) || strings.Contains(s, adminToken) {
			t.Errorf("a token leaked into the admin log:\n%s", s)
		}
	})
	return &bundle{t: t, h: h, store: d, admin: a, srv: srv, logs: logs, ctx: ctx}
}

// publish inserts evs in one committed transaction.
func (b *bundle) publish(evs ...*txbox.Event) {
	b.t.Helper()
	tx := b.h.Begin(b.t, b.store)
	if err := b.store.OutboxInsert(b.ctx, tx.Native(), &store.OutboxInsertParams{Events: evs}); err != nil {
		_ = tx.Rollback()
		b.t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.t.Fatal(err)
	}
}

// deadLetter publishes one event, fails it for good with msg and moves it
// to the dead-letter table.
func (b *bundle) deadLetter(typ, key string, payload []byte, msg string) txbox.ID {
	b.t.Helper()
	ev := &txbox.Event{ID: txbox.NewID(), Type: typ, Key: key, Payload: payload, Headers: map[string]string{"tenant": "acme"}}
	b.publish(ev)
	rows, err := b.store.OutboxClaim(b.ctx, &store.OutboxClaimParams{EventType: typ, Limit: 1, LeaseDuration: time.Hour})
	if err != nil || len(rows) != 1 || rows[0].ID != ev.ID {
		b.t.Fatalf("claim: %v, %v", rows, err)
	}
	if _, err := b.store.OutboxFinish(b.ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{
		{ID: ev.ID, LeaseToken: rows[0].LeaseToken, Outcome: store.OutcomeFailed, Error: msg}}}); err != nil {
		b.t.Fatal(err)
	}
	if n, err := b.store.DeadLetterMove(b.ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 1 {
		b.t.Fatalf("move: %d, %v", n, err)
	}
	return ev.ID
}

// do sends a request with token (empty: none) and returns the status and
// body.
func (b *bundle) do(method, path, token string, body string) (int, []byte, http.Header) {
	b.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(b.ctx, method, b.srv.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.srv.Client().Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return res.StatusCode, out, res.Header
}

// getJSON GETs path with the read token, expects 200 and decodes into v.
func (b *bundle) getJSON(path string, v any) {
	b.t.Helper()
	st, body, _ := b.do(http.MethodGet, path, readToken, "")
	if st != http.StatusOK {
		b.t.Fatalf("GET %s: %d %s", path, st, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		b.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// post POSTs body with the admin token, expects want and decodes into v.
func (b *bundle) post(path, body string, want int, v any) {
	b.t.Helper()
	st, out, _ := b.do(http.MethodPost, path, adminToken, body)
	if st != want {
		b.t.Fatalf("POST %s %s: %d %s, want %d", path, body, st, out, want)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			b.t.Fatalf("POST %s: %v in %s", path, err, out)
		}
	}
}
