package admin

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/txbox/txbox/store"
)

// auditAppendTimeout bounds the write of one audit entry. It runs after
// the action, detached from the request: a client that hung up still gets
// its action recorded.
const auditAppendTimeout = 5 * time.Second

// auditSampleIDs is how many of an ids action's ids its audit entry
// names, as the audit log line does.
const auditSampleIDs = 10

// AuditEntry is an entry of the audit trail as the API shows it
// (GET /api/v1/audit).
type AuditEntry struct {
	ID int64 `json:"id"`
	// Tenant is the tenant whose trail holds the entry, on a relay with
	// tenants (each tenant's trail is in its own store); absent otherwise.
	Tenant string `json:"tenant,omitempty"`
	// At is when the entry was written, on the database clock.
	At time.Time `json:"at"`
	// Who is the token's name (admin-token) or "cli:<OS user>".
	Who string `json:"who"`
	// Action is retry, resolve, delete, ...
	Action string `json:"action"`
	// Selector is ids, filter, all or group.
	Selector string `json:"selector"`
	// Filter is the JSON text of the filter or group the action used (or
	// of the ids it named), as text: it may be clipped, so clients show
	// it rather than parse it.
	Filter  string `json:"filter"`
	DryRun  bool   `json:"dry_run"`
	Matched int64  `json:"matched"`
	Changed int64  `json:"changed"`
	// Error is why the action stopped; absent when it completed.
	Error string `json:"error,omitempty"`
}

// AuditPage is a page of the audit trail, newest first.
type AuditPage struct {
	Entries []AuditEntry `json:"entries"`
	// NextCursor, when set, fetches the next (older) page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// auditParams are the parameters the audit listing accepts.
var auditParams = map[string]bool{"limit": true, "cursor": true, "action": true}

// auditList serves GET /api/v1/audit?limit=&cursor=&action=: the audit
// trail newest first, keyset-paged like the dead-letter listing.
func (h *Handler) auditList(w http.ResponseWriter, r *http.Request) {
	p, err := parseAuditQuery(r.URL.Query())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	limit := p.Limit
	p.Limit++ // one more tells whether there is a next page
	rows, err := h.cfg.Store.AuditList(r.Context(), &p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	page := AuditPage{Entries: []AuditEntry{}}
	for i, e := range rows {
		if i == limit {
			page.NextCursor = encodeAuditCursor(rows[i-1].ID)
			break
		}
		page.Entries = append(page.Entries, AuditEntry{ID: e.ID, Tenant: h.tenant, At: e.At, Who: e.Who, Action: e.Action, Selector: e.Selector,
			Filter: e.Filter, DryRun: e.DryRun, Matched: e.Matched, Changed: e.Changed, Error: e.Error})
	}
	writeJSON(w, http.StatusOK, page)
}

// parseAuditQuery parses the audit listing's query string; bad values are
// 400s naming the parameter, as the dead-letter listing's.
func parseAuditQuery(q url.Values) (store.AuditListParams, error) {
	var errs paramErrors
	checkParams(q, auditParams, &errs)
	out := store.AuditListParams{Limit: limitParam(q, DefaultPageSize, MaxPageSize, &errs)}
	if v := q.Get("cursor"); v != "" {
		id, err := decodeAuditCursor(v)
		if err != nil {
			errs.add("cursor", "not a cursor returned by this API")
		} else {
			out.After = id
		}
	}
	if v := q.Get("action"); v != "" {
		if !store.ValidAuditAction(v) {
			errs.add("action", fmt.Sprintf("must be 1 to %d characters of a-z 0-9 . _ -", store.MaxAuditAction))
		} else {
			out.Action = v
		}
	}
	if err := errs.err(); err != nil {
		return store.AuditListParams{}, err
	}
	return out, nil
}

// auditCursorTag starts every audit cursor, so that a dead-letter cursor
// given to the audit listing (or the reverse) is refused, not misread.
const auditCursorTag = 'a'

// encodeAuditCursor returns the cursor after the entry id: base64url of
// the tag and the id (8 bytes, big endian).
func encodeAuditCursor(id int64) string {
	var b [9]byte
	b[0] = auditCursorTag
	binary.BigEndian.PutUint64(b[1:], uint64(id))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeAuditCursor(s string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, err
	}
	if len(b) != 9 || b[0] != auditCursorTag {
		return 0, errors.New("not an audit cursor")
	}
	id := int64(binary.BigEndian.Uint64(b[1:]))
	if id < 1 {
		return 0, errors.New("not an audit cursor")
	}
	return id, nil
}

// appendAudit writes the audit entry of an action that ran (or a dry
// run): who is the token's name. The action is done: a failed write is
// logged at WARN and never changes the response.
func (h *Handler) appendAudit(r *http.Request, res BulkResult, f store.DeadLetterFilter, actionErr error) {
	selector, filter := res.Selector, ""
	switch res.Selector {
	case "ids":
		filter = auditIDs(res.IDs, res.Matched)
	default:
		selector, filter = store.AuditSelectorOf(res.Selector, &f), store.AuditFilterJSON(&f)
	}
	h.appendAuditEntry(r, res, selector, filter, actionErr)
}

// appendAuditEntry writes the entry of res, which chose its rows by
// selector, described by filter (a JSON text).
func (h *Handler) appendAuditEntry(r *http.Request, res BulkResult, selector, filter string, actionErr error) {
	e := &store.AuditEntry{
		Who: who(r), Action: res.Action, Selector: selector, Filter: filter, DryRun: res.DryRun,
		Matched: int64(res.Matched), Changed: int64(res.Changed),
	}
	if actionErr != nil {
		e.Error = actionErr.Error()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditAppendTimeout)
	defer cancel()
	if err := h.cfg.Store.AuditAppend(ctx, e); err != nil {
		h.log.Warn("admin audit: the audit entry was not written", slog.String("who", e.Who),
			slog.String("action", e.Action), slog.Bool("dry_run", e.DryRun), slog.Any("error", err))
	}
}

// auditIDs is the Filter of an ids action's entry: the first ids and how
// many were matched.
func auditIDs(ids []string, matched int) string {
	if len(ids) > auditSampleIDs {
		ids = ids[:auditSampleIDs]
	}
	b, err := json.Marshal(struct {
		IDs     []string `json:"ids"`
		Matched int      `json:"matched"`
	}{IDs: ids, Matched: matched})
	if err != nil {
		return "{}"
	}
	return string(b)
}
