package inboxtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/storeharness"
)

// TestPostgresTyped shows inbox.Typed handing the handler a pgx.Tx.
func TestPostgresTyped(t *testing.T) {
	t.Parallel()
	h := storeharness.PostgresInbox()
	ns, d := h.Setup(t)
	in, err := inbox.New(d, inbox.Config{Consumer: "typed"})
	if err != nil {
		t.Fatal(err)
	}
	id := txbox.NewID()
	r, err := in.Handle(context.Background(), inbox.Message{ID: id}, inbox.Typed(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{ns, "inbox_effect"}.Sanitize()+` VALUES ('typed', $1)`, m.ID.String())
		return err
	}))
	if err != nil || r != inbox.Processed {
		t.Fatalf("Handle = %v, %v", r, err)
	}
	if got := h.CountEffects(t, ns, "typed"); got[id] != 1 {
		t.Errorf("effects = %v", got)
	}
}
