package webhook_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/txbox/txbox"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store/sqlite"
)

// The receiving Handler behind a test server, fed by txbox's own webhook
// sender with the same secret: the event sent twice (a relay that
// crashed after the POST and before its commit sends it again) is
// acknowledged both times and handled once. A request without a valid
// signature is refused with 401 before the inbox is touched.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "consume-webhook-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(filepath.Join(dir, "billing.db"), sqlite.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	_ = st.Migrate(ctx)
	_, _ = st.DB().Exec(`CREATE TABLE invoices (event_id TEXT, body TEXT)`)
	in, err := inbox.New(st, inbox.Config{Consumer: "billing"})
	if err != nil {
		fmt.Println(err)
		return
	}

	h, err := cwebhook.New(cwebhook.Config{
		Inbox:  in,
		Secret: "whsec-shared", // in production: os.Getenv, the sender's hmac-secret
		Handler: inbox.Typed(func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (event_id, body) VALUES (?, ?)`, m.ID.String(), string(m.Payload))
			return err
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("POST /events/", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	s, err := webhook.New(webhook.Config{Secret: "whsec-shared"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	msg := &sender.Message{ID: txbox.NewID(), EventType: "order-paid", Key: "order-42",
		Payload: []byte(`{"order":42}`), Route: sender.Route{URL: srv.URL + "/events/order-paid"}}
	for range 2 {
		fmt.Println("send:", s.Send(ctx, []*sender.Message{msg}))
	}
	var n int
	_ = st.DB().QueryRow(`SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)

	resp, err := http.Post(srv.URL+"/events/order-paid", "application/json", strings.NewReader(`{"order":43}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("unsigned:", resp.StatusCode)
	// Output:
	// send: <nil>
	// send: <nil>
	// invoices: 1
	// unsigned: 401
}
