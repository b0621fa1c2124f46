package rediscache

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store"
)

// Defaults of Config.
const (
	// DefaultNamespace starts every key when Config.Namespace is empty.
	DefaultNamespace = "txbox:inbox"
	// DefaultTTL is Config.TTL's default: one hour, well under the inbox's
	// default 24h, so a hot id is answered from Redis while the table keeps
	// the long memory.
	DefaultTTL = time.Hour
)

// Config configures a Cache.
type Config struct {
	// Namespace starts every key; set it to your service's name so that
	// services sharing one Redis never see each other's entries. 1..100
	// characters from [A-Za-z0-9._:-]. Defaults to DefaultNamespace.
	Namespace string
	// TTL is each key's lifetime; it must not exceed the inbox TTL
	// (inbox.New checks). Defaults to DefaultTTL.
	TTL time.Duration
}

// Cache is an inbox.Cache on Redis. It is safe for concurrent use.
type Cache struct {
	client redis.UniversalClient
	ns     string
	ttl    time.Duration
}

var _ inbox.Cache = (*Cache)(nil)

// New returns a Cache on client, which stays the caller's to close. An
// invalid namespace or a negative TTL is an *inbox.ConfigError.
func New(client redis.UniversalClient, cfg Config) (*Cache, error) {
	if client == nil {
		return nil, &inbox.ConfigError{Component: "inbox/rediscache", Field: "client", Reason: "is nil"}
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	// The consumer-name alphabet keeps keys free of glob characters, so
	// SCAN MATCH "<namespace>:*" selects exactly this namespace.
	if err := store.ValidateConsumerName(cfg.Namespace); err != nil {
		return nil, &inbox.ConfigError{Component: "inbox/rediscache", Field: "Namespace", Reason: "is not valid: " + err.Error(), Err: err}
	}
	if cfg.TTL < 0 {
		return nil, &inbox.ConfigError{Component: "inbox/rediscache", Field: "TTL", Reason: fmt.Sprintf("must not be negative, got %s", cfg.TTL)}
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	return &Cache{client: client, ns: cfg.Namespace, ttl: cfg.TTL}, nil
}

// Key returns the Redis key of consumer's id.
func (c *Cache) Key(consumer string, id txbox.ID) string {
	return c.ns + ":" + consumer + ":" + id.String()
}

// Contains reports whether the key of consumer's id exists. A Redis error
// is returned as is; the inbox then falls back to the table.
func (c *Cache) Contains(ctx context.Context, consumer string, id txbox.ID) (bool, error) {
	n, err := c.client.Exists(ctx, c.Key(consumer, id)).Result()
	if err != nil {
		return false, fmt.Errorf("rediscache: exists: %w", err)
	}
	return n == 1, nil
}

// Add sets the keys of consumer's ids with the TTL, in one pipelined round
// trip.
func (c *Cache) Add(ctx context.Context, consumer string, ids []txbox.ID) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.Set(ctx, c.Key(consumer, id), "1", c.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rediscache: set: %w", err)
	}
	return nil
}

// TTL returns the keys' lifetime.
func (c *Cache) TTL() time.Duration { return c.ttl }

// Purge deletes every key of the namespace with SCAN and DEL (never
// FLUSHDB, which would take other applications' keys along). It is meant
// for tests and operators; the inbox never needs it.
func (c *Cache) Purge(ctx context.Context) (int, error) {
	n := 0
	iter := c.client.Scan(ctx, 0, c.ns+":*", 500).Iterator()
	batch := make([]string, 0, 500)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		d, err := c.client.Del(ctx, batch...).Result()
		n += int(d)
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return n, fmt.Errorf("rediscache: purge: %w", err)
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, fmt.Errorf("rediscache: purge: %w", err)
	}
	if err := flush(); err != nil {
		return n, fmt.Errorf("rediscache: purge: %w", err)
	}
	return n, nil
}
