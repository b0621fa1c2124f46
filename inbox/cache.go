package inbox

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/txbox/txbox"
)

// Cache remembers ids that a consumer has processed, in front of the inbox
// table. It is an optimisation only: a miss (or an error) falls through to
// the table, so a cache may forget anything at any time. Implementations
// must namespace entries by consumer and be safe for concurrent use.
type Cache interface {
	// Contains reports whether consumer has processed id.
	Contains(ctx context.Context, consumer string, id txbox.ID) (bool, error)
	// Add remembers ids as processed by consumer, for TTL. The Inbox calls
	// it only after the ids' table rows were committed.
	Add(ctx context.Context, consumer string, ids []txbox.ID) error
	// TTL is how long an entry is kept at most. New refuses a cache whose
	// TTL exceeds the inbox TTL.
	TTL() time.Duration
}

// DefaultLRUSize is the capacity of an LRU when none is configured.
const DefaultLRUSize = 100_000

// LRU is an in-memory Cache holding at most Size entries, each for at most
// TTL. It suits a single consumer process: other processes do not see its
// entries, which costs them a table lookup, never correctness.
type LRU struct {
	mu    sync.Mutex
	size  int
	ttl   time.Duration
	now   func() time.Time
	ll    *list.List // front = most recently used
	items map[lruKey]*list.Element
}

type lruKey struct {
	consumer string
	id       txbox.ID
}

type lruEntry struct {
	key     lruKey
	expires time.Time
}

var _ Cache = (*LRU)(nil)

// NewLRU returns an LRU of the given capacity and TTL. size 0 means
// DefaultLRUSize; a negative size or a TTL that is not positive is a
// *ConfigError.
func NewLRU(size int, ttl time.Duration) (*LRU, error) {
	if size < 0 {
		return nil, &ConfigError{Component: "inbox", Field: "LRU size", Reason: fmt.Sprintf("must not be negative, got %d", size)}
	}
	if size == 0 {
		size = DefaultLRUSize
	}
	if ttl <= 0 {
		return nil, &ConfigError{Component: "inbox", Field: "LRU TTL", Reason: fmt.Sprintf("must be positive, got %s", ttl)}
	}
	return &LRU{size: size, ttl: ttl, now: time.Now, ll: list.New(), items: make(map[lruKey]*list.Element)}, nil
}

// Contains reports whether consumer's id is cached and not expired. It
// never fails.
func (c *LRU) Contains(_ context.Context, consumer string, id txbox.ID) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[lruKey{consumer, id}]
	if !ok {
		return false, nil
	}
	e := el.Value.(*lruEntry)
	if !c.now().Before(e.expires) {
		c.ll.Remove(el)
		delete(c.items, e.key)
		return false, nil
	}
	c.ll.MoveToFront(el)
	return true, nil
}

// Add caches ids for consumer, evicting the least recently used entries
// beyond the capacity. It never fails.
func (c *LRU) Add(_ context.Context, consumer string, ids []txbox.ID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp := c.now().Add(c.ttl)
	for _, id := range ids {
		k := lruKey{consumer, id}
		if el, ok := c.items[k]; ok {
			el.Value.(*lruEntry).expires = exp
			c.ll.MoveToFront(el)
			continue
		}
		c.items[k] = c.ll.PushFront(&lruEntry{key: k, expires: exp})
		for c.ll.Len() > c.size {
			old := c.ll.Back()
			c.ll.Remove(old)
			delete(c.items, old.Value.(*lruEntry).key)
		}
	}
	return nil
}

// TTL returns the entry lifetime.
func (c *LRU) TTL() time.Duration { return c.ttl }

// Len returns the number of entries, expired ones included until they are
// looked up or evicted.
func (c *LRU) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// Purge empties the cache, as a restart would.
func (c *LRU) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ll.Init()
	clear(c.items)
}
