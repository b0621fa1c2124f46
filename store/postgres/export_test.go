package postgres

import (
	"context"

	"github.com/txbox/txbox/store"
)

// MessagePrefix exposes the WAL mode message prefix to the external tests,
// which compare it with what the emit check of migration 6 returns.
func MessagePrefix(d *Driver) string { return d.messagePrefix() }

// StartStreamUnchecked opens a stream without OpenStream's checks, so that
// a test reaches the server's own refusal of START_REPLICATION.
func (d *Driver) StartStreamUnchecked(ctx context.Context) (store.Stream, error) {
	start, err := d.checkStreamForTest(ctx)
	if err != nil {
		return nil, err
	}
	return d.startStream(ctx, start, store.StreamOptions{StatusInterval: DefaultStreamStatusInterval, Window: DefaultStreamWindow}, nil)
}

// checkStreamForTest reads what checkStream reads, without refusing a busy
// slot.
func (d *Driver) checkStreamForTest(ctx context.Context) (*streamStart, error) {
	var nsp, rel string
	err := d.pool.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
		d.table(d.tables.Outbox)).Scan(&nsp, &rel)
	if err != nil {
		return nil, err
	}
	return &streamStart{nsp: nsp, rel: rel}, nil
}

// Resets is how many times d reset its pool after a lost connection.
func Resets(d *Driver) int { return d.watch.resetCount() }
