package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/txbox/txbox/sender"
)

// startCheckTimeout bounds Start's check of the store when Start's
// context has no earlier deadline: a database that does not answer at all
// (a port that drops packets) fails Start within it rather than hang it.
const startCheckTimeout = 15 * time.Second

// senderCheckTimeout bounds the check of one sender's connection after
// Start.
const senderCheckTimeout = 10 * time.Second

// checkStore is Start's check that the database answers: one read of the
// outbox table, the one discovery makes at start anyway
// (store.Outbox.OutboxPendingTypes). It fails on an unreachable server, a
// wrong DSN or password and missing tables alike, each of which would
// leave a relay that can only log failed claims. Not the schema version
// (store.SchemaVersioner): a schema migrated with the plain SQL files and
// an external tool does not record one. Config.StartWithoutStore skips it.
func (r *Relay) checkStore(ctx context.Context) error {
	if r.cfg.StartWithoutStore {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	defer cancel()
	if _, err := r.cfg.Store.OutboxPendingTypes(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrStoreUnreachable, err)
	}
	return nil
}

// checkSenders checks, in goroutines of the lifetime, the connection of
// every sender that can tell (sender.ConnectionChecker), and logs a
// warning for each that cannot be reached. It does not fail Start and
// does not hold it: a broker that is down at start must not stop the
// relay from delivering to the others; its events wait in the outbox and
// its circuit handles the outage.
func (r *Relay) checkSenders() {
	for _, name := range sortedKeys(r.cfg.Senders) {
		cc, ok := r.cfg.Senders[name].(sender.ConnectionChecker)
		if !ok {
			continue
		}
		r.life.Go(func() {
			ctx, cancel := context.WithTimeout(r.runCtx, senderCheckTimeout)
			defer cancel()
			if err := cc.CheckConnection(ctx); err != nil && r.runCtx.Err() == nil {
				r.log.Warn("sender unreachable at start; its events wait in the outbox until it answers",
					slog.String("sender", name), slog.Any("error", err))
			}
		})
	}
}
