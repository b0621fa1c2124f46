package inboxtest_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/inbox/rediscache"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
)

func redisCache(t *testing.T, ttl time.Duration) (inbox.Cache, func()) {
	testenv.RequireTCP(t, "Redis", testenv.RedisAddr)
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	t.Cleanup(func() { _ = c.Close() })
	rc, err := rediscache.New(c, rediscache.Config{Namespace: testenv.UniqueName("txboxtest:"), TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	purge := func() {
		if _, err := rc.Purge(context.Background()); err != nil {
			t.Errorf("purge: %v", err)
		}
	}
	t.Cleanup(purge)
	return rc, purge
}

// TestRedisCache runs the cache contract with Redis in front of
// PostgreSQL; FlushMidRun deletes every key of the test's namespace while
// redeliveries are in flight.
func TestRedisCache(t *testing.T) {
	t.Parallel()
	inboxtest.ExerciseCache(t, storeharness.PostgresInbox(), redisCache)
}

// TestRedisDownFallsBackToTable: with Redis unreachable the inbox still
// answers from the table, logging a warning and never the payload.
func TestRedisDownFallsBackToTable(t *testing.T) {
	t.Parallel()
	h := storeharness.SQLiteInbox()
	ns, st := h.Setup(t)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	rc, err := rediscache.New(c, rediscache.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	in, err := inbox.New(st, inbox.Config{Consumer: "down", Cache: rc, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	handler := h.EffectHandler(ns, "down")
	id := txbox.NewID()
	msg := inbox.Message{ID: id, Payload: []byte("secret-payload")}
	if r, err := in.Handle(context.Background(), msg, handler); err != nil || r != inbox.Processed {
		t.Fatalf("first = %v, %v", r, err)
	}
	if r, err := in.Handle(context.Background(), msg, handler); err != nil || r != inbox.Duplicate {
		t.Fatalf("second = %v, %v; want duplicate from the table", r, err)
	}
	if got := h.CountEffects(t, ns, "down"); got[id] != 1 {
		t.Errorf("effects = %v", got)
	}
	out := logs.String()
	if !strings.Contains(out, "inbox cache lookup failed") {
		t.Errorf("no warning logged:\n%s", out)
	}
	if strings.Contains(out, "secret-payload") {
		t.Error("payload appears in the logs")
	}
}
