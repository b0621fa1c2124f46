package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// DeadLetter is a dead letter as the API shows it.
type DeadLetter struct {
	ID        string `json:"id"`
	EventType string `json:"event_type"`
	Key       string `json:"key,omitempty"`
	// Route is the fan-out route the dead letter failed on
	// (docs/concepts.md, "Fan-out"); absent for a type with one route.
	// EventID is the event's id when it is not ID: on the dead letters
	// of an event's second and further routes (store.OutboxRow.EventID);
	// absent otherwise, ID being the event's.
	Route      string            `json:"route,omitempty"`
	EventID    string            `json:"event_id,omitempty"`
	Status     string            `json:"status"`
	Attempts   int               `json:"attempts"`
	LastError  string            `json:"last_error"`
	CreatedAt  time.Time         `json:"created_at"`
	FailedAt   time.Time         `json:"failed_at"`
	ResolvedAt *time.Time        `json:"resolved_at,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Payload    Payload           `json:"payload"`
}

// Payload describes a dead letter's payload without trusting it: its
// size, a content type (the content-type header when the event has one,
// else sniffed), and a preview that is a JSON string, UTF-8 text or
// base64, never markup.
type Payload struct {
	Size int `json:"size"`
	// ContentType is absent in listings unless the event has a
	// content-type header: a listing never reads payloads, so it cannot
	// sniff one.
	ContentType string `json:"content_type,omitempty"`
	// Encoding is "utf-8" when Preview is the text itself, "base64" for
	// binary payloads.
	Encoding string `json:"encoding,omitempty"`
	// Preview is the first PreviewBytes of the payload (all of it with
	// ?full=true); absent in listings.
	Preview   *string `json:"preview,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
}

func headerContentType(headers map[string]string) string {
	for k, v := range headers {
		if strings.EqualFold(k, "content-type") && v != "" {
			return v
		}
	}
	return ""
}

func contentType(p []byte, headers map[string]string) string {
	if ct := headerContentType(headers); ct != "" {
		return ct
	}
	switch {
	case len(p) == 0:
		return "application/octet-stream"
	case json.Valid(p):
		return "application/json"
	}
	return http.DetectContentType(p)
}

// payloadView shows dl's payload; preview < 0 leaves the preview out, and
// the payload is not looked at (a listing has none).
func payloadView(dl *store.DeadLetter, preview int) Payload {
	v := Payload{Size: dl.PayloadSize, ContentType: headerContentType(dl.Headers)}
	if preview < 0 {
		return v
	}
	p := dl.Payload
	v.ContentType = contentType(p, dl.Headers)
	cut := p
	if len(cut) > preview {
		cut, v.Truncated = cut[:preview], true
		// Do not split a UTF-8 sequence at the cut.
		for i := 0; i < utf8.UTFMax && len(cut) > 0 && !utf8.Valid(cut) && utf8.Valid(p); i++ {
			cut = cut[:len(cut)-1]
		}
	}
	var s string
	if utf8.Valid(cut) {
		v.Encoding, s = "utf-8", string(cut)
	} else {
		v.Encoding, s = "base64", base64.StdEncoding.EncodeToString(cut)
	}
	v.Preview = &s
	return v
}

func view(dl *store.DeadLetter, preview int) DeadLetter {
	out := DeadLetter{
		ID: dl.ID.String(), EventType: dl.EventType, Key: dl.Key, Route: dl.Route, Status: strings.ToLower(dl.Status),
		Attempts: dl.Attempts, LastError: dl.LastError, CreatedAt: dl.CreatedAt.UTC(), FailedAt: dl.FailedAt.UTC(),
		Headers: dl.Headers, Payload: payloadView(dl, preview),
	}
	if dl.EventID != (txbox.ID{}) {
		out.EventID = dl.EventID.String()
	}
	if !dl.ResolvedAt.IsZero() {
		t := dl.ResolvedAt.UTC()
		out.ResolvedAt = &t
	}
	return out
}

// DeadLetterPage is one page of a listing. NextCursor, when set, is the
// cursor parameter of the next page.
type DeadLetterPage struct {
	Items      []DeadLetter `json:"items"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

func (h *Handler) deadLetterList(w http.ResponseWriter, r *http.Request) {
	q, err := parseListQuery(r.URL.Query(), listParams)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rows, err := h.cfg.Store.DeadLetterList(r.Context(), &store.DeadLetterListParams{Filter: q.filter, After: q.after, Limit: q.limit + 1})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	page := DeadLetterPage{Items: []DeadLetter{}}
	for i, dl := range rows {
		if i == q.limit {
			last := rows[i-1]
			page.NextCursor = encodeCursor(store.DeadLetterCursor{FailedAt: last.FailedAt, ID: last.ID})
			break
		}
		page.Items = append(page.Items, view(dl, -1))
	}
	writeJSON(w, http.StatusOK, page)
}

func (h *Handler) deadLetterCount(w http.ResponseWriter, r *http.Request) {
	q, err := parseListQuery(r.URL.Query(), countParams)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	n, err := h.cfg.Store.DeadLetterCount(r.Context(), &q.filter)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"count": n})
}

func (h *Handler) getDeadLetter(w http.ResponseWriter, r *http.Request, allowed ...string) (*store.DeadLetter, bool) {
	var errs paramErrors
	for k := range r.URL.Query() {
		if !contains(allowed, k) {
			errs.add(clipParam(k), "unknown parameter")
		}
	}
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		errs = append(errs, err.(paramErrors)...)
	}
	if len(errs) > 0 {
		h.writeError(w, r, errs)
		return nil, false
	}
	dl, err := h.cfg.Store.DeadLetterGet(r.Context(), id)
	if err != nil {
		h.writeError(w, r, err)
		return nil, false
	}
	return dl, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (h *Handler) deadLetterGet(w http.ResponseWriter, r *http.Request) {
	full := false
	switch v := r.URL.Query().Get("full"); v {
	case "", "false", "0":
	case "true", "1":
		full = true
	default:
		h.writeError(w, r, paramErrors{{Param: "full", Detail: "must be true or false"}})
		return
	}
	dl, ok := h.getDeadLetter(w, r, "full")
	if !ok {
		return
	}
	preview := h.cfg.PreviewBytes
	if full {
		preview = len(dl.Payload)
	}
	writeJSON(w, http.StatusOK, view(dl, preview))
}

// deadLetterPayload sends the payload bytes as a download, always as
// application/octet-stream: whatever the producer put in it, a browser
// never renders it.
func (h *Handler) deadLetterPayload(w http.ResponseWriter, r *http.Request) {
	dl, ok := h.getDeadLetter(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+dl.ID.String()+`.bin"`)
	_, _ = w.Write(dl.Payload)
}

// action is retry, resolve or delete.
type action struct {
	name string
	// apply changes the dead letters and returns how many changed.
	apply func(s store.DeadLetters, ctx context.Context, ids []txbox.ID) (int, error)
	// wouldChange reports whether the dry run counts e as one the action
	// would change.
	wouldChange func(e store.DeadLetterEntry) bool
}

var actions = []action{
	{"retry", store.DeadLetters.DeadLetterRetry, func(store.DeadLetterEntry) bool { return true }},
	{"resolve", store.DeadLetters.DeadLetterResolve, func(e store.DeadLetterEntry) bool { return e.Status == store.DeadLetterUnresolved }},
	{"delete", store.DeadLetters.DeadLetterDelete, func(store.DeadLetterEntry) bool { return true }},
}

// BulkRequest is the body of a bulk action: exactly one of IDs, a
// non-empty Filter, or All.
type BulkRequest struct {
	IDs    []string `json:"ids,omitempty"`
	Filter *Filter  `json:"filter,omitempty"`
	// All must be true to act on every dead letter, so that a forgotten
	// filter never does.
	All    bool `json:"all,omitempty"`
	DryRun bool `json:"dry_run,omitempty"`
	// Cursor, with Filter or All, continues an action that stopped at
	// MaxBulk where it stopped: the NextCursor of its result.
	Cursor string `json:"cursor,omitempty"`
	// Rate, when above 0, throttles the action to this many dead letters
	// per second (at most MaxRate), so that a large retry does not flood
	// the destination that just recovered. One request then acts on at
	// most ThrottledRequestSeconds × Rate dead letters (and MaxBulk) and
	// returns NextCursor to go on: the result of each request is the
	// action's progress.
	Rate float64 `json:"rate,omitempty"`
}

// MaxRate is the largest Rate a bulk action accepts; ThrottledRequestSeconds
// bounds how long one throttled request runs.
const (
	MaxRate                 = 100_000
	ThrottledRequestSeconds = 20
)

// BulkResult reports a bulk or single action.
type BulkResult struct {
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	// Selector is "ids", "filter" or "all".
	Selector string `json:"selector"`
	// Matched counts the dead letters selected (at most MaxBulk).
	Matched int `json:"matched"`
	// Changed counts those changed; for a dry run, those that would be.
	Changed int `json:"changed"`
	// More is true when the filter matched more than MaxBulk: repeat
	// with NextCursor as the cursor to go on from there.
	More       bool   `json:"more,omitempty"`
	NextCursor string `json:"next_cursor,omitempty"`
	// IDs are the first 100 selected ids.
	IDs []string `json:"ids"`
}

const sampleIDs = 100

// decodeBody decodes a JSON body strictly: unknown fields and trailing
// data are errors. An empty body decodes as the zero value.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return err
		case errors.Is(err, io.EOF):
			return nil
		}
		return paramErrors{{Param: "body", Detail: "not the expected JSON object: " + clipParam(err.Error())}}
	}
	if dec.More() {
		return paramErrors{{Param: "body", Detail: "trailing data after the JSON object"}}
	}
	return nil
}

// selection is what a bulk or single action acts on: the dead letters
// among ids, or those matching filter from after on.
type selection struct {
	ids    []txbox.ID
	filter store.DeadLetterFilter
	after  *store.DeadLetterCursor
	single bool
	// rate is BulkRequest.Rate; 0 runs unthrottled.
	rate float64
}

func (h *Handler) bulk(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req BulkRequest
		if err := decodeBody(r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
		var errs paramErrors
		var sel selection
		res := BulkResult{Action: a.name, DryRun: req.DryRun, IDs: []string{}}
		n := 0
		if len(req.IDs) > 0 {
			n++
			res.Selector = "ids"
		}
		if req.Filter != nil && !req.Filter.empty() {
			n++
			res.Selector = "filter"
			sel.filter = req.Filter.toStore("filter.", &errs)
		}
		if req.All {
			n++
			res.Selector = "all"
		}
		switch {
		case n == 0:
			errs.add("body", "give ids, a non-empty filter, or all: true")
		case n > 1:
			errs.add("body", "give only one of ids, filter and all")
		case len(req.IDs) > MaxBulk:
			errs.add("ids", fmt.Sprintf("at most %d ids", MaxBulk))
		case req.Cursor != "" && res.Selector == "ids":
			errs.add("cursor", "only with filter or all")
		case req.Rate < 0 || req.Rate > MaxRate || req.Rate != req.Rate:
			errs.add("rate", fmt.Sprintf("must be from 0 (no limit) to %d dead letters per second", MaxRate))
		}
		sel.rate = req.Rate
		if req.Cursor != "" {
			c, err := decodeCursor(req.Cursor)
			if err != nil {
				errs.add("cursor", "not a cursor returned by this API")
			}
			sel.after = c
		}
		for i, s := range req.IDs {
			id, err := txbox.ParseID(s)
			if err != nil {
				errs.add(fmt.Sprintf("ids[%d]", i), "not a UUID")
				continue
			}
			sel.ids = append(sel.ids, id)
		}
		if err := errs.err(); err != nil {
			h.writeError(w, r, err)
			return
		}
		h.run(w, r, a, res, sel)
	}
}

func (h *Handler) single(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			DryRun bool `json:"dry_run,omitempty"`
		}
		id, err := parseID(r.PathValue("id"))
		if err == nil {
			err = decodeBody(r, &req)
		}
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		res := BulkResult{Action: a.name, DryRun: req.DryRun, Selector: "ids", IDs: []string{}}
		h.run(w, r, a, res, selection{ids: []txbox.ID{id}, single: true})
	}
}

// run walks the selected dead letters a page at a time
// (store.DeadLetterWalk: ids, failure times and statuses, never payloads)
// and applies the action to each page before reading the next, unless it
// is a dry run; then it writes the audit line and the result. Ids are
// looked up store.MaxFilterIDs at a time; a filter is walked for at most
// MaxBulk dead letters. A single action on an unknown id is a 404.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, a action, res BulkResult, sel selection) {
	ctx := r.Context()
	if !res.DryRun {
		// Mutations outlive a client that hangs up: half a bulk action
		// done and unreported is worse than the whole one done.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
	}
	limit, rate := MaxBulk, 0.0
	if sel.rate > 0 && !res.DryRun {
		rate = sel.rate
		limit = max(1, min(MaxBulk, int(sel.rate*ThrottledRequestSeconds)))
	}
	visit := func(page []store.DeadLetterEntry) error {
		res.Matched += len(page)
		ids := make([]txbox.ID, len(page))
		for i, e := range page {
			ids[i] = e.ID
			if len(res.IDs) < sampleIDs {
				res.IDs = append(res.IDs, e.ID.String())
			}
			if res.DryRun && a.wouldChange(e) {
				res.Changed++
			}
		}
		if res.DryRun {
			return nil
		}
		n, err := a.apply(h.cfg.Store, ctx, ids)
		res.Changed += n
		if a.name == "retry" && n > 0 {
			h.wakeRetried(sel.filter.EventType)
		}
		return err
	}
	var err error
	if res.Selector == "ids" {
		err = walkIDs(ctx, h.cfg.Store, sel.ids, visit)
	} else {
		var next *store.DeadLetterCursor
		next, err = store.DeadLetterWalk(ctx, h.cfg.Store, &store.DeadLetterWalkParams{Filter: sel.filter, After: sel.after, Limit: limit, Rate: rate}, visit)
		if next != nil {
			res.More, res.NextCursor = true, encodeCursor(*next)
		}
	}
	if res.Changed > 0 {
		h.stats.invalidate()
	}
	if err != nil {
		if !res.DryRun {
			h.audit(r, res, sel.filter, err)
		}
		h.writeError(w, r, err)
		return
	}
	if sel.single && res.Matched == 0 {
		writeProblem(w, r, http.StatusNotFound, "no such dead letter", nil)
		return
	}
	h.audit(r, res, sel.filter, nil)
	writeJSON(w, http.StatusOK, res)
}

// wakeRetried wakes a relay running in the handler's process for the
// retried dead letters' type (every poller, with a discovery look, when
// the action did not name one): on MySQL and SQLite, which have no
// NOTIFY, its poller would otherwise wait for its next poll (up to
// polling.max-delay). On PostgreSQL the retry's NOTIFY wakes it too; the
// second wake-up costs one claim.
func (h *Handler) wakeRetried(eventType string) {
	wk, ok := h.cfg.Relay.(waker)
	if !ok {
		return
	}
	if eventType != "" {
		wk.Wake(eventType)
		return
	}
	wk.Wake()
}

// walkIDs walks the dead letters among ids (duplicates and unknown ids
// drop out), store.MaxFilterIDs ids at a time.
func walkIDs(ctx context.Context, s store.DeadLetters, ids []txbox.ID, visit func([]store.DeadLetterEntry) error) error {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), store.MaxFilterIDs)]
		ids = ids[len(chunk):]
		if _, err := store.DeadLetterWalk(ctx, s, &store.DeadLetterWalkParams{Filter: store.DeadLetterFilter{IDs: chunk}}, visit); err != nil {
			return err
		}
	}
	return nil
}

// audit writes one line per mutation (and per dry run): who (the token's
// name, never the token), what, how many; and the same as an entry of the
// audit trail (appendAudit, audit.go).
func (h *Handler) audit(r *http.Request, res BulkResult, f store.DeadLetterFilter, err error) {
	h.appendAudit(r, res, f, err)
	attrs := []any{
		slog.String("who", who(r)), slog.String("action", res.Action), slog.Bool("dry_run", res.DryRun),
		slog.String("selector", res.Selector), slog.Int("matched", res.Matched), slog.Int("changed", res.Changed),
		slog.String("remote_addr", r.RemoteAddr),
	}
	if res.Selector == "filter" {
		var fa []any
		for _, kv := range [][2]string{{"type", f.EventType}, {"status", f.Status}, {"key", clipParam(f.Key)}, {"error", clipParam(f.ErrorContains)}, {"group", f.Group}, {"route", f.Route}} {
			if kv[1] != "" {
				fa = append(fa, slog.String(kv[0], kv[1]))
			}
		}
		for _, kv := range []struct {
			k string
			t time.Time
		}{{"failed_after", f.FailedAfter}, {"failed_before", f.FailedBefore}} {
			if !kv.t.IsZero() {
				fa = append(fa, slog.Time(kv.k, kv.t))
			}
		}
		attrs = append(attrs, slog.Group("filter", fa...))
	}
	if len(res.IDs) <= 10 {
		attrs = append(attrs, slog.Any("ids", res.IDs))
	}
	if res.More {
		attrs = append(attrs, slog.Bool("more", true))
	}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
		h.log.Warn("admin audit: dead-letter "+res.Action+" failed", attrs...)
		return
	}
	h.log.Info("admin audit: dead-letter "+res.Action, attrs...)
}
