package admin_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/store/sqlite"
)

// Mount the admin API in a service, with an extra handler (a health probe
// here) behind the same checks. Every route needs a token.
func Example() {
	dir, _ := os.MkdirTemp("", "txbox-admin-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(filepath.Join(dir, "txbox.db"), sqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	if err := st.Migrate(context.Background()); err != nil {
		panic(err)
	}
	h, err := admin.New(admin.Config{Store: st, ReadToken: "read-token-0123456789", AdminToken: "admin-token-0123456789"})
	if err != nil {
		panic(err)
	}
	h.Handle("/livez", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv := httptest.NewServer(h) // in production: admin.NewServer(admin.DefaultListen, h, logger)
	defer srv.Close()

	get := func(path, token string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Printf("%s %d %s", path, res.StatusCode, body)
	}
	get("/livez", "")
	fmt.Println()
	get("/livez", "read-token-0123456789")
	fmt.Println()
	get("/api/v1/dead-letters/count?status=unresolved", "read-token-0123456789")
	// Output:
	// /livez 401 {"type":"about:blank","title":"Unauthorized","status":401,"detail":"a bearer token (read or admin) is required","instance":"/livez"}
	//
	// /livez 200 ok
	// /api/v1/dead-letters/count?status=unresolved 200 {"count":0}
}
