package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/sqlite"
)

// A transactional consumer: the handler's write and the recorded id commit
// together, so the redelivery of the same event is a no-op.
func ExampleInbox_Handle() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Config{})
	defer st.Close()
	ctx := context.Background()
	_ = st.Migrate(ctx)
	_, _ = st.DB().Exec(`CREATE TABLE shipments (order_id TEXT)`)

	in, err := inbox.New(st, inbox.Config{Consumer: "shipping"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ship := inbox.Typed(func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, m.Key)
		return err
	})
	msg := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-42"}
	for i := 0; i < 3; i++ { // the broker delivers it three times
		r, err := in.Handle(ctx, msg, ship)
		fmt.Println(r, err)
	}
	var n int
	_ = st.DB().QueryRow(`SELECT count(*) FROM shipments`).Scan(&n)
	fmt.Println("shipments:", n)
	// Output:
	// processed <nil>
	// duplicate <nil>
	// duplicate <nil>
	// shipments: 1
}
