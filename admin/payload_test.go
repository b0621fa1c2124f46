package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/storetest"
)

// payloadCounter is the real store with a count of the payload bytes it
// handed to the admin handler, and of the dead letters it fetched one by
// one.
type payloadCounter struct {
	store.Driver
	bytes, gets atomic.Int64
}

func (p *payloadCounter) DeadLetterList(ctx context.Context, params *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	dls, err := p.Driver.DeadLetterList(ctx, params)
	for _, dl := range dls {
		p.bytes.Add(int64(len(dl.Payload)))
	}
	return dls, err
}

func (p *payloadCounter) DeadLetterGet(ctx context.Context, id txbox.ID) (*store.DeadLetter, error) {
	dl, err := p.Driver.DeadLetterGet(ctx, id)
	p.gets.Add(1)
	if dl != nil {
		p.bytes.Add(int64(len(dl.Payload)))
	}
	return dl, err
}

// allDialects are dialects() and MariaDB: the dead-letter routes' reads
// differ per dialect.
func allDialects() map[string]storetest.Harness {
	d := dialects()
	d["mariadb"] = storeharness.MySQL()
	return d
}

// TestDeadLetterRoutesReadNoPayloads: listing, counting and every bulk
// action (by ids, filter and all, dry runs included) read no payload from
// the store; only a preview reads one, of the one dead letter shown. It
// used to read every payload of a page, and every payload of up to 10,000
// dead letters for a bulk action.
func TestDeadLetterRoutesReadNoPayloads(t *testing.T) {
	t.Parallel()
	for name, h := range allDialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var spy *payloadCounter
			b := setup(t, h, func(c *admin.Config) {
				spy = &payloadCounter{Driver: c.Store}
				c.Store = spy
			})
			const size = 256 << 10
			var ids []txbox.ID
			for i := range 6 {
				ids = append(ids, b.deadLetter("heavy", fmt.Sprintf("k%d", i%2), bytes.Repeat([]byte{'a' + byte(i)}, size), "422"))
			}
			var page admin.DeadLetterPage
			b.getJSON("/api/v1/dead-letters?limit=4", &page)
			if len(page.Items) != 4 || page.Items[0].Payload.Size != size || page.Items[0].Payload.Preview != nil {
				t.Fatalf("listing: %+v", page)
			}
			b.getJSON("/api/v1/dead-letters?limit=4&cursor="+page.NextCursor, &page)
			var count struct{ Count int }
			b.getJSON("/api/v1/dead-letters/count?type=heavy", &count)
			var res admin.BulkResult
			for _, body := range []string{
				`{"all":true,"dry_run":true}`,
				`{"filter":{"key":"k0"},"dry_run":true}`,
				fmt.Sprintf(`{"ids":[%q,%q],"dry_run":true}`, ids[0], ids[1]),
			} {
				for _, a := range []string{"retry", "resolve", "delete"} {
					b.post("/api/v1/dead-letters/"+a, body, http.StatusOK, &res)
				}
			}
			b.post("/api/v1/dead-letters/"+ids[5].String()+"/retry", `{"dry_run":true}`, http.StatusOK, &res)
			b.post("/api/v1/dead-letters/resolve", `{"filter":{"key":"k1"}}`, http.StatusOK, &res)
			if res.Changed != 3 {
				t.Fatalf("resolve k1: %+v", res)
			}
			b.post("/api/v1/dead-letters/retry", fmt.Sprintf(`{"ids":[%q]}`, ids[0]), http.StatusOK, &res)
			b.post("/api/v1/dead-letters/delete", `{"all":true}`, http.StatusOK, &res)
			if res.Changed != 5 {
				t.Fatalf("delete all: %+v", res)
			}
			if n, g := spy.bytes.Load(), spy.gets.Load(); n != 0 || g != 0 {
				t.Fatalf("listings, counts and bulk actions read %d payload bytes in %d single fetches, want none", n, g)
			}
			id := b.deadLetter("heavy-preview", "", bytes.Repeat([]byte{'z'}, size), "422")
			var dl admin.DeadLetter
			b.getJSON("/api/v1/dead-letters/"+id.String(), &dl)
			if spy.bytes.Load() != size || spy.gets.Load() != 1 || dl.Payload.Size != size || len(*dl.Payload.Preview) != admin.DefaultPreviewBytes {
				t.Fatalf("preview: read %d bytes in %d fetches, shows %+v", spy.bytes.Load(), spy.gets.Load(), dl.Payload)
			}
		})
	}
}

// TestBulkActionCursor: a bulk action by filter or all goes on from a
// cursor (the next_cursor of an action that stopped at MaxBulk, or of a
// listing page: the positions are the same) and acts only below it; a
// cursor with ids, or one this API did not hand out, is a 400 naming it.
func TestBulkActionCursor(t *testing.T) {
	t.Parallel()
	for name, h := range allDialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, nil)
			var ids []txbox.ID
			for i := range 5 {
				ids = append(ids, b.deadLetter("paged", "", []byte("{}"), fmt.Sprint(i)))
			}
			var page admin.DeadLetterPage
			b.getJSON("/api/v1/dead-letters?limit=2", &page)
			if len(page.Items) != 2 || page.NextCursor == "" {
				t.Fatalf("first page: %+v", page)
			}
			var res admin.BulkResult
			b.post("/api/v1/dead-letters/delete", `{"all":true,"cursor":"`+page.NextCursor+`"}`, http.StatusOK, &res)
			if res.Matched != 3 || res.Changed != 3 || res.More || res.NextCursor != "" {
				t.Fatalf("delete from the cursor: %+v", res)
			}
			var left admin.DeadLetterPage
			b.getJSON("/api/v1/dead-letters", &left)
			if len(left.Items) != 2 || left.Items[0].ID != page.Items[0].ID || left.Items[1].ID != page.Items[1].ID {
				t.Fatalf("left %+v, want the first page's two", left.Items)
			}
			for body, param := range map[string]string{
				fmt.Sprintf(`{"ids":[%q],"cursor":%q}`, ids[0], page.NextCursor): "cursor",
				`{"all":true,"cursor":"AAAA"}`:                                   "cursor",
				`{"filter":{"failed_after":"9999-12-31T23:59:59-14:00"}}`:        "filter.failed_after",
			} {
				st, out, _ := b.do(http.MethodPost, "/api/v1/dead-letters/retry", adminToken, body)
				if st != http.StatusBadRequest || !bytes.Contains(out, []byte(`"param":"`+param+`"`)) {
					t.Errorf("%s: %d %s, want a 400 naming %s", body, st, out, param)
				}
			}
		})
	}
}
