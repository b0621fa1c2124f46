package postgres

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// listenBackoff is the wait of the listener's reconnect loop after each
// failure since it was last connected: 100ms doubling up to 10s.
var listenBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Multiplier: 2, Max: 10 * time.Second}

// listenLostBackoff replaces listenBackoff while the failures are lost
// connections (store.ErrConnectionLost): a failover, whose new primary
// the listener should find within about a second, since the wake-ups of
// the events published meanwhile go to it.
var listenLostBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}

// OutboxListen LISTENs on the driver's channel on one dedicated connection
// (opened from the pool's connection config, never borrowed from the pool,
// so a long wait cannot starve it) and calls wake with the event type of
// every notification. On connection loss it reconnects with exponential
// backoff: at most a second while the connection is lost
// (store.ErrConnectionLost), which also resets the pool, as any lost
// connection does. wake runs on the listener's goroutine and should
// return quickly (signal a channel, do not poll from it). It returns
// ctx.Err() when ctx ends. See store.Waker.
func (d *Driver) OutboxListen(ctx context.Context, wake func(eventType string)) error {
	return d.OutboxListenReady(ctx, wake, nil)
}

// OutboxListenReady is OutboxListen that calls ready, when not nil, each
// time the LISTEN is in place: at first and after each reconnect. A
// NOTIFY sent before that reaches no listener (see store.ReadyWaker).
func (d *Driver) OutboxListenReady(ctx context.Context, wake func(eventType string), ready func()) error {
	failures := backoff.Streak{Policy: listenBackoff}
	lost := backoff.Streak{Policy: listenLostBackoff}
	connected := func() {
		failures.Reset()
		lost.Reset()
		if ready != nil {
			ready()
		}
	}
	for {
		err := d.listenOnce(ctx, wake, connected)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = d.seen(lostErr(err))
		lvl := slog.LevelWarn
		var wait time.Duration
		if errors.Is(err, store.ErrConnectionLost) {
			wait = lost.Next()
			if lost.Len() > 1 {
				// The driver said the database was lost, and will say
				// when it is back: one line per second would add nothing.
				lvl = slog.LevelDebug
			}
		} else {
			wait = failures.Next()
		}
		// pgconn's errors name host, user and database, never the password.
		d.logger.Log(ctx, lvl, "txbox postgres listener lost its connection; reconnecting",
			slog.Any("error", err), slog.Duration("backoff", wait), slog.String("channel", d.channel))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (d *Driver) listenOnce(ctx context.Context, wake func(string), connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.channel}.Sanitize()); err != nil {
		return err
	}
	connected()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel == d.channel && n.Payload != "" {
			wake(n.Payload)
		}
	}
}
