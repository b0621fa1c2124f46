package webhook_test

import (
	"context"
	"database/sql"
	"log"
	"net/http"
	"os"

	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/mysql"
)

// Receiving txbox's signed webhooks into a MySQL-backed inbox.
func Example() {
	st, err := mysql.Open("app@tcp(db:3306)/app?parseTime=true", mysql.Config{})
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(st, inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	h, err := cwebhook.New(cwebhook.Config{
		Inbox:  in,
		Secret: os.Getenv("TXBOX_WEBHOOK_SECRET"), // the sender's secret
		Handler: inbox.Typed(func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (event_id, body) VALUES (?, ?)`, m.ID.String(), m.Payload)
			return err
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /events/", h)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
