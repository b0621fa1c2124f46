package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// BenchmarkEmitVsInsert pairs (see paired) a bare INSERT into the outbox
// table with WAL mode's OutboxInsert of the same events, each in its own
// transaction, against a real slot: one event, and batches of 100 against
// one INSERT ... SELECT FROM unnest and against COPY. txbox/base below 1
// means the emit is faster.
func BenchmarkEmitVsInsert(b *testing.B) {
	ctx := context.Background()
	proto := benchEvent()
	for _, syncCommit := range []bool{true, false} {
		for _, c := range []struct {
			name string
			n    int
			copy bool
		}{{"one", 1, false}, {"batch100", 100, false}, {"batch100-copy", 100, true}} {
			name := fmt.Sprintf("%s/%s", map[bool]string{true: "fsync", false: "nofsync"}[syncCommit], c.name)
			b.Run(name, func(b *testing.B) {
				slot := testenv.UniqueName("txbox_b_slot_")
				d := benchDriver(b, syncCommit, func(cfg *postgres.Config) {
					cfg.Source = postgres.SourceWAL
					cfg.WAL.Slot = slot
				})
				w := &emitEnv{d: d, pool: d.Pool(), db: admin(b), schema: d.Tables().Schema, slot: slot, pub: testenv.UniqueName("txbox_b_pub_")}
				w.createSlot(b)
				events := make([]*txbox.Event, c.n)
				for i := range events {
					ev := proto
					events[i] = &ev
				}
				ids := make([]txbox.ID, c.n)
				types, keys := make([]string, c.n), make([]string, c.n)
				payloads, headers := make([][]byte, c.n), make([]string, c.n)
				rows := make([][]any, c.n)
				one := `INSERT INTO ` + w.tbl("outbox") + ` (id, event_type, event_key, payload, headers) VALUES ($1, $2, $3, $4, $5)`
				batch := `INSERT INTO ` + w.tbl("outbox") + ` (id, event_type, event_key, payload, headers)
					SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[])`
				table := pgx.Identifier{d.Tables().Schema, d.Tables().Outbox}
				cols := []string{"id", "event_type", "event_key", "payload", "headers"}
				paired(b, c.n,
					func() time.Duration {
						start := time.Now()
						for i := range ids {
							ids[i], types[i], keys[i], payloads[i], headers[i] = txbox.NewID(), proto.Type, proto.Key, proto.Payload, benchHeaders
							rows[i] = []any{ids[i], proto.Type, proto.Key, proto.Payload, benchHeaders}
						}
						return time.Since(start) + inTx(b, d, func(tx pgx.Tx) error {
							var err error
							switch {
							case c.n == 1:
								_, err = tx.Exec(ctx, one, ids[0], types[0], keys[0], payloads[0], headers[0])
							case c.copy:
								_, err = tx.CopyFrom(ctx, table, cols, pgx.CopyFromRows(rows))
							default:
								_, err = tx.Exec(ctx, batch, ids, types, keys, payloads, headers)
							}
							return err
						})
					},
					func() time.Duration {
						start := time.Now()
						for _, ev := range events {
							ev.ID = txbox.NewID()
						}
						return time.Since(start) + inTx(b, d, func(tx pgx.Tx) error {
							return d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: events})
						})
					})
			})
		}
	}
}
