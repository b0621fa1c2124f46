package admin

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// RedriveBudget bounds how long one POST /api/v1/redrive works: it stops
// after MaxBulk events or this long, whichever comes first, and answers
// more with a next_cursor. It keeps a throttled redrive well inside the
// server's WriteTimeout; the client repeats with the cursor.
const RedriveBudget = 20 * time.Second

// RedriveRequest is the body of POST /api/v1/redrive: send the kept
// (PROCESSED) events of one type again (docs/operations.md, "Redrive from
// kept events").
type RedriveRequest struct {
	// Type is the event type; required.
	Type string `json:"type"`
	// Key keeps only the events of this key.
	Key string `json:"key,omitempty"`
	// ProcessedAfter (inclusive) and ProcessedBefore (exclusive) bound
	// when the destination acknowledged the event: RFC 3339 in any
	// offset, compared in UTC, as the dead-letter time filters are.
	ProcessedAfter  string `json:"processed_after,omitempty"`
	ProcessedBefore string `json:"processed_before,omitempty"`
	// IDs keeps only these events; at most store.MaxFilterIDs.
	IDs []string `json:"ids,omitempty"`
	// DryRun counts and lists the events, and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Rate, when above 0, throttles the redrive to about this many events
	// per second: the handler sleeps between pages.
	Rate float64 `json:"rate,omitempty"`
	// Cursor continues a redrive where the previous answer stopped: its
	// NextCursor.
	Cursor string `json:"cursor,omitempty"`
}

// RedriveResult is the answer of POST /api/v1/redrive.
type RedriveResult struct {
	Action string `json:"action"`
	Type   string `json:"type"`
	DryRun bool   `json:"dry_run"`
	// Matched counts the kept events selected; Changed those set back to
	// pending (0 for a dry run). An event cleaned up or redriven by
	// someone else in between is matched but not changed.
	Matched int `json:"matched"`
	Changed int `json:"changed"`
	// Pages is how many pages (store.RedrivePageSize events at most) the
	// request walked.
	Pages int `json:"pages"`
	// More is true when the request stopped at MaxBulk events or at
	// RedriveBudget with events left: send the same body with cursor set
	// to NextCursor to go on.
	More       bool   `json:"more,omitempty"`
	NextCursor string `json:"next_cursor,omitempty"`
	// OldestProcessedAt and NewestProcessedAt span the processed times of
	// the matched events.
	OldestProcessedAt *time.Time `json:"oldest_processed_at,omitempty"`
	NewestProcessedAt *time.Time `json:"newest_processed_at,omitempty"`
	// IDs are the first 100 matched ids, in the order they go out again.
	IDs []string `json:"ids"`
}

// waker is what a relay running in the handler's process offers
// (*relay.Relay does): MySQL and SQLite have no NOTIFY, so a redrive wakes
// that relay directly instead of leaving the rows to its next poll.
type waker interface {
	Wake(eventTypes ...string)
}

// redrive handles POST /api/v1/redrive: it walks the kept events of one
// type a page at a time (ids and processed times only, never payloads),
// sets each page back to pending unless it is a dry run, wakes the relay,
// throttles to the rate, and stops at MaxBulk events or RedriveBudget.
func (h *Handler) redrive(w http.ResponseWriter, r *http.Request) {
	var req RedriveRequest
	if err := decodeBody(r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	p, err := req.params()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if h.cfg.Retention != nil {
		ret, known := h.cfg.Retention(p.EventType)
		switch {
		case !known:
			writeProblem(w, r, http.StatusUnprocessableEntity, "unknown event type", []ParamError{{Param: "type",
				Detail: "the relay's configuration does not name this event type (events." + p.EventType + "), and its defaults keep no delivered rows"}})
			return
		case ret <= 0:
			writeProblem(w, r, http.StatusUnprocessableEntity, "this event type keeps no delivered events", []ParamError{{Param: "type",
				Detail: "retention is 0 for this type: its rows are deleted when delivered, so there is nothing to send again; set events." + p.EventType + ".retention to keep them"}})
			return
		}
	}
	rd, ok := h.cfg.Store.(store.OutboxRedriver)
	if !ok {
		writeProblem(w, r, http.StatusNotImplemented, "the "+h.cfg.Store.Dialect()+" store cannot redrive", nil)
		return
	}
	res := RedriveResult{Action: "redrive", Type: p.EventType, DryRun: p.DryRun, IDs: []string{}}
	err = h.walkRedrive(r, rd, &p, req.Rate, &res)
	if res.Changed > 0 {
		h.stats.invalidate()
	}
	h.auditRedrive(r, &p, &res, err)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// params validates the request; errors name the body's fields.
func (req *RedriveRequest) params() (store.OutboxRedriveParams, error) {
	var errs paramErrors
	var p store.OutboxRedriveParams
	switch {
	case req.Type == "":
		errs.add("type", "required: the event type whose kept events to send again")
	case txbox.ValidateEventType(req.Type) != nil:
		errs.add("type", "not a valid event type: 1 to 200 characters of A-Z a-z 0-9 . _ : -")
	default:
		p.EventType = req.Type
	}
	p.Key = text("key", req.Key, &errs)
	p.ProcessedAfter = timeParam("processed_after", req.ProcessedAfter, &errs)
	p.ProcessedBefore = timeParam("processed_before", req.ProcessedBefore, &errs)
	if !p.ProcessedAfter.IsZero() && !p.ProcessedBefore.IsZero() && !p.ProcessedBefore.After(p.ProcessedAfter) {
		errs.add("processed_before", "must be after processed_after")
	}
	if len(req.IDs) > store.MaxFilterIDs {
		errs.add("ids", fmt.Sprintf("at most %d ids", store.MaxFilterIDs))
	} else {
		for i, s := range req.IDs {
			id, err := txbox.ParseID(s)
			if err != nil {
				errs.add(fmt.Sprintf("ids[%d]", i), "not a UUID")
				continue
			}
			p.IDs = append(p.IDs, id)
		}
	}
	if math.IsNaN(req.Rate) || math.IsInf(req.Rate, 0) || req.Rate < 0 {
		errs.add("rate", "must be 0 (no throttle) or a positive number of events per second")
	}
	if req.Cursor != "" {
		c, err := txbox.ParseID(req.Cursor)
		if err != nil {
			errs.add("cursor", "not a cursor returned by this API")
		}
		p.After = c
	}
	p.DryRun = req.DryRun
	return p, errs.err()
}

// walkRedrive walks pages from p.After until a page is short, MaxBulk
// events were matched, or RedriveBudget has passed, filling res. A
// mutation goes on when the client hangs up (half a page changed and
// unreported is worse than the page done) but stops at the next page.
func (h *Handler) walkRedrive(r *http.Request, rd store.OutboxRedriver, p *store.OutboxRedriveParams, rate float64, res *RedriveResult) error {
	ctx := r.Context()
	if !p.DryRun {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), RedriveBudget+time.Minute)
		defer cancel()
	}
	size := store.RatePage(rate, store.RedrivePageSize)
	start := time.Now()
	var oldest, newest time.Time
	full := false
	for res.Matched < MaxBulk && time.Since(start) < RedriveBudget && r.Context().Err() == nil {
		p.Limit = min(size, MaxBulk-res.Matched)
		page, err := rd.OutboxRedrive(ctx, p)
		if err != nil {
			return err
		}
		res.Pages++
		res.Matched += page.Matched
		res.Changed += page.Changed
		for _, id := range page.Sample {
			if len(res.IDs) < sampleIDs {
				res.IDs = append(res.IDs, id.String())
			}
		}
		if !page.Oldest.IsZero() && (oldest.IsZero() || page.Oldest.Before(oldest)) {
			oldest = page.Oldest
		}
		if page.Newest.After(newest) {
			newest = page.Newest
		}
		if page.Changed > 0 {
			// PostgreSQL's NOTIFY went out with the page; a relay in
			// this process is woken directly on every dialect.
			if wk, ok := h.cfg.Relay.(waker); ok {
				wk.Wake(p.EventType)
			}
		}
		full = page.Matched == p.Limit
		if page.Matched > 0 {
			p.After = page.Last
			res.NextCursor = page.Last.String()
		}
		if !full {
			break
		}
		if !p.DryRun {
			// Sleep until the events changed so far are due at rate.
			if err := store.Pace(r.Context(), rate, start, res.Matched, start.Add(RedriveBudget)); err != nil {
				break
			}
		}
	}
	if !oldest.IsZero() {
		o, n := oldest.UTC(), newest.UTC()
		res.OldestProcessedAt, res.NewestProcessedAt = &o, &n
	}
	if full {
		// Stopped at a bound after a full page: is there more?
		probe := *p
		probe.Limit, probe.DryRun = 1, true
		more, err := rd.OutboxRedrive(ctx, &probe)
		if err != nil {
			return err
		}
		res.More = more.Matched > 0
	}
	if !res.More {
		res.NextCursor = ""
	}
	return nil
}

// auditRedrive records the redrive through the audit of the dead-letter
// actions, as action "redrive". The selection is carried in a
// DeadLetterFilter: type, key and ids as they are; FailedAfter and
// FailedBefore hold the processed_after and processed_before bounds
// (a redrive filters on when events were delivered, not failed).
func (h *Handler) auditRedrive(r *http.Request, p *store.OutboxRedriveParams, res *RedriveResult, err error) {
	if err != nil && res.DryRun {
		return // as for the dead-letter actions: a failed dry run changed nothing
	}
	// Always "filter": the type is one, whether or not ids narrow it.
	br := BulkResult{
		Action: res.Action, DryRun: res.DryRun, Selector: "filter", Matched: res.Matched, Changed: res.Changed,
		More: res.More, NextCursor: res.NextCursor, IDs: res.IDs,
	}
	filter := store.AuditRedriveJSON(p)
	h.appendAuditEntry(r, br, store.AuditSelectorFilter, filter, err)
	attrs := []any{
		slog.String("who", who(r)), slog.String("action", br.Action), slog.Bool("dry_run", br.DryRun),
		slog.Int("matched", br.Matched), slog.Int("changed", br.Changed), slog.String("filter", filter),
		slog.String("remote_addr", r.RemoteAddr),
	}
	if err != nil {
		h.log.Warn("admin audit: redrive failed", append(attrs, slog.Any("error", err))...)
		return
	}
	h.log.Info("admin audit: redrive", attrs...)
}
