package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// unknownTimeout is a PostgreSQL driver that does not know its sender
// timeout, as a store.Streamer may not.
type unknownTimeout struct{ *postgres.Driver }

func (unknownTimeout) StreamSenderTimeout() time.Duration { return 0 }

// TestStreamPauseLimitBelowSenderTimeout: New checks the stream's pause
// limit against the sender timeout of the store it streams, as the YAML
// loader checks database.wal.pause-limit, and an unset pause limit is
// half of that timeout, so a short timeout needs no pause limit of its
// own. The drivers are real ones in WAL mode; New does not connect.
func TestStreamPauseLimitBelowSenderTimeout(t *testing.T) {
	t.Parallel()
	pool := storeharness.PostgresPool(t, 2)
	walDriver := func(senderTimeout time.Duration) *postgres.Driver {
		d, err := postgres.New(pool, postgres.Config{Source: postgres.SourceWAL, WAL: postgres.WALConfig{SenderTimeout: senderTimeout}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	short, long := walDriver(4*time.Second), walDriver(0) // 0: the driver's default, 10s
	senders := map[string]sender.Sender{"a": nopSender{}}
	for _, tc := range []struct {
		name       string
		store      store.Driver
		pauseLimit time.Duration
		want       time.Duration // the pause limit New keeps; 0: an error
		reason     string
	}{
		{"above the timeout", short, 5 * time.Second, 0, "must be below the store's sender timeout (4s), not 5s:"},
		{"equal to the timeout", short, 4 * time.Second, 0, "must be below the store's sender timeout (4s), not 4s:"},
		{"below the timeout", short, 3 * time.Second, 3 * time.Second, ""},
		{"unset, short timeout", short, 0, 2 * time.Second, ""},
		{"unset, default timeout", long, 0, DefaultStreamPauseLimit, ""},
		{"above the default timeout", long, 10 * time.Second, 0, "must be below the store's sender timeout (10s), not 10s:"},
		{"timeout unknown", unknownTimeout{short}, time.Minute, time.Minute, ""},
		{"unset, timeout unknown", unknownTimeout{short}, 0, DefaultStreamPauseLimit, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(Config{Store: tc.store, Senders: senders, Stream: StreamConfig{Enabled: true, PauseLimit: tc.pauseLimit}})
			if tc.want == 0 {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Field != "Stream.PauseLimit" || !strings.HasPrefix(ce.Reason, tc.reason) {
					t.Fatalf("New: %v; want a *ConfigError for Stream.PauseLimit, reason %q…", err, tc.reason)
				}
				if !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("error %v does not match ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if got := r.cfg.Stream.PauseLimit; got != tc.want {
				t.Errorf("pause limit %s, want %s", got, tc.want)
			}
		})
	}
}
