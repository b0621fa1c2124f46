package inboxtest_test

import (
	"testing"
	"time"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/storeharness"
)

func lruCache(t *testing.T, ttl time.Duration) (inbox.Cache, func()) {
	c, err := inbox.NewLRU(1000, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return c, c.Purge
}

// TestLRUCache runs the cache contract with the in-process LRU in front of
// every dialect's store.
func TestLRUCache(t *testing.T) {
	t.Parallel()
	for _, h := range []inboxtest.Harness{storeharness.PostgresInbox(), storeharness.MySQLInbox(), storeharness.SQLiteInbox()} {
		t.Run(h.Name, func(t *testing.T) {
			t.Parallel()
			inboxtest.ExerciseCache(t, h, lruCache)
		})
	}
}
