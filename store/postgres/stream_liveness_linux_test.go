package postgres_test

import (
	"testing"
	"time"

	"github.com/txbox/txbox/store/postgres"
)

// TestStreamSocketOptions: the replication connection of a stream has TCP
// keepalive giving up after about the sender timeout, and
// TCP_USER_TIMEOUT of the sender timeout.
func TestStreamSocketOptions(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 4*time.Second)
	s := e.open(t, nil)
	got := postgres.StreamTCPOptions(t, s)
	want := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 2, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 2, "TCP_USER_TIMEOUT": 4000}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
}
