package outbox

import (
	"context"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// TxPublisher is a [Publisher] whose methods take one transaction type,
// TTx, fixed by the store it is built from, so that handing it a pool, a
// *sql.DB or another driver's transaction does not compile instead of
// failing at run time with txbox.ErrNoTransaction or an
// *txbox.UnsupportedTxError. The dialect packages hand out the typed
// stores:
//
//	pub, err := outbox.NewTxPublisher(pg.Pgx(), outbox.Config{})  // Publish(ctx, pgx.Tx, …)
//	pub, err := outbox.NewTxPublisher(pg.SQL(), outbox.Config{})  // Publish(ctx, *sql.Tx, …)
//	pub, err := outbox.NewTxPublisher(pg.ORM(), outbox.Config{})  // Publish(ctx, store.ExecTx, …): sqlx, bun, ent
//
// It behaves as a Publisher in every other way (validation, ids, trace
// context, Config). Publisher.Publish, which takes any, stays for
// transactions whose type is only known at run time, such as a GORM
// *gorm.DB's underlying *sql.Tx taken from its Statement.ConnPool
// (docs/orm.md). It is safe for concurrent use.
type TxPublisher[TTx any] struct {
	pub   *Publisher
	store store.TxOutbox[TTx]
}

// NewTxPublisher returns a TxPublisher writing through s, a typed store
// such as postgres.Driver.Pgx(). The Config is a Publisher's.
func NewTxPublisher[TTx any](s store.TxOutbox[TTx], cfg Config) (*TxPublisher[TTx], error) {
	if s == nil {
		return nil, &txbox.ConfigError{Component: "outbox", Field: "store", Reason: "is nil"}
	}
	pub, err := NewPublisher(s, cfg)
	if err != nil {
		return nil, err
	}
	return &TxPublisher[TTx]{pub: pub, store: s}, nil
}

// Publish is Publisher.Publish with tx of the publisher's transaction
// type. A nil tx is still txbox.ErrNoTransaction.
func (p *TxPublisher[TTx]) Publish(ctx context.Context, tx TTx, events ...txbox.Event) ([]txbox.ID, error) {
	if any(tx) == nil {
		return nil, txbox.ErrNoTransaction
	}
	return p.pub.publish(ctx, events, func(ctx context.Context, params *store.OutboxInsertParams) error {
		return p.store.OutboxInsertTx(ctx, tx, params)
	})
}

// PublishJSON is Publisher.PublishJSON with tx of the publisher's
// transaction type.
func (p *TxPublisher[TTx]) PublishJSON(ctx context.Context, tx TTx, eventType, key string, v any) (txbox.ID, error) {
	return publishJSON(ctx, p.Publish, tx, eventType, key, v)
}

// Publisher returns the untyped Publisher underneath, which shares its
// Config, for code that takes a *Publisher.
func (p *TxPublisher[TTx]) Publisher() *Publisher { return p.pub }
