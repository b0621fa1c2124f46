package rediscache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inbox/rediscache"
	"github.com/txbox/txbox/internal/testenv"
)

func client(t *testing.T) *redis.Client {
	t.Helper()
	testenv.RequireTCP(t, "Redis", testenv.RedisAddr)
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newCache(t *testing.T, c *redis.Client, ttl time.Duration) *rediscache.Cache {
	t.Helper()
	rc, err := rediscache.New(c, rediscache.Config{Namespace: testenv.UniqueName("txboxtest:"), TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = rc.Purge(context.Background()) })
	return rc
}

func TestContainsAddTTL(t *testing.T) {
	t.Parallel()
	c := client(t)
	rc := newCache(t, c, time.Minute)
	ctx := context.Background()
	a, b := txbox.NewID(), txbox.NewID()
	if hit, err := rc.Contains(ctx, "orders", a); err != nil || hit {
		t.Fatalf("empty Contains = %v, %v", hit, err)
	}
	if err := rc.Add(ctx, "orders", []txbox.ID{a, b}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []txbox.ID{a, b} {
		if hit, err := rc.Contains(ctx, "orders", id); err != nil || !hit {
			t.Errorf("Contains(%s) = %v, %v; want a hit", id, hit, err)
		}
	}
	if hit, _ := rc.Contains(ctx, "billing", a); hit {
		t.Error("another consumer sees orders' entry")
	}
	ttl, err := c.PTTL(ctx, rc.Key("orders", a)).Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("key TTL = %v, %v; want within (0, 1m]", ttl, err)
	}
	if rc.TTL() != time.Minute {
		t.Errorf("TTL() = %v", rc.TTL())
	}
}

func TestNamespacesAreIsolated(t *testing.T) {
	t.Parallel()
	c := client(t)
	one, two := newCache(t, c, time.Minute), newCache(t, c, time.Minute)
	ctx := context.Background()
	id := txbox.NewID()
	if err := one.Add(ctx, "c", []txbox.ID{id}); err != nil {
		t.Fatal(err)
	}
	if hit, _ := two.Contains(ctx, "c", id); hit {
		t.Error("namespace two sees namespace one's entry")
	}
	if err := two.Add(ctx, "c", []txbox.ID{id}); err != nil {
		t.Fatal(err)
	}
	n, err := one.Purge(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	if hit, _ := one.Contains(ctx, "c", id); hit {
		t.Error("entry survived Purge")
	}
	if hit, _ := two.Contains(ctx, "c", id); !hit {
		t.Error("Purge of one namespace deleted another's key")
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	c := client(t)
	for _, cfg := range []rediscache.Config{
		{Namespace: "a*b"}, {Namespace: "a b"}, {Namespace: "x\"; FLUSHALL"}, {TTL: -time.Second},
	} {
		_, err := rediscache.New(c, cfg)
		var ce *inbox.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("New(%+v) = %v; want *inbox.ConfigError", cfg, err)
		}
	}
	if _, err := rediscache.New(nil, rediscache.Config{}); err == nil {
		t.Error("nil client accepted")
	}
	rc, err := rediscache.New(c, rediscache.Config{})
	if err != nil || rc.TTL() != rediscache.DefaultTTL || rc.Key("c", txbox.ID{}) != "txbox:inbox:c:00000000-0000-0000-0000-000000000000" {
		t.Errorf("defaults: %v, %v", rc, err)
	}
}

func TestRedisDownIsAnError(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	rc, err := rediscache.New(c, rediscache.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Contains(context.Background(), "c", txbox.NewID()); err == nil {
		t.Error("Contains on an unreachable Redis returned no error")
	}
}
