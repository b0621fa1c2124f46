package relaytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox/relay"
)

// StopTimeout bounds the graceful stop that Start registers for the end of
// the test: long enough for a loaded machine to finish a batch, short enough
// that a relay that hangs on Stop fails the test instead of the run.
const StopTimeout = 30 * time.Second

// Start builds a relay from cfg, starts it and stops it when the test ends.
// A test that stops the relay itself may do so: the later ErrNotStarted is
// not reported; any other Stop error fails the test.
func Start(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if err := r.Stop(ctx); err != nil && !errors.Is(err, relay.ErrNotStarted) {
			t.Errorf("relay stop: %v", err)
		}
	})
	return r
}
