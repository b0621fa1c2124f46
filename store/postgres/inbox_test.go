package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store"
)

// TestInboxRecordDatabaseSQL records through a *sql.Tx of the pgx stdlib
// driver, the path ORMs take.
func TestInboxRecordDatabaseSQL(t *testing.T) {
	t.Parallel()
	d := storeharness.PostgresInbox().Open(t, newSchema(t))
	ctx := context.Background()
	db := admin(t)
	a, b := txbox.NewID(), txbox.NewID()
	for round, want := range [][]txbox.ID{{a, b}, {}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.InboxRecord(ctx, tx, &store.InboxRecordParams{Consumer: "std", IDs: []txbox.ID{a, b, a}})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("round %d: InboxRecord = %v, want %v", round, got, want)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.InboxRecord(ctx, db, &store.InboxRecordParams{Consumer: "std", IDs: []txbox.ID{a}}); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Errorf("*sql.DB: err = %v, want ErrNoTransaction", err)
	}
}
