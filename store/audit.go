package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// AuditLog is the part of the seam for the audit trail: one row per
// mutating operator action on dead letters (retry, resolve, delete,
// redrive, ...), dry runs included, written by the admin API and by
// `txbox dlq` after the action ran. Every in-tree dialect implements it.
type AuditLog interface {
	// AuditAppend writes e as a new row; the database assigns its ID and
	// its time (At), which AuditAppend sets on e. Over-long or invalid
	// texts are clipped (AuditEntry.Normalize), never refused: the action
	// it records already happened. A missing or malformed Action, or
	// negative counts, are refused with an error matching
	// ErrInvalidParams.
	AuditAppend(ctx context.Context, e *AuditEntry) error
	// AuditList lists entries newest first (id descending), after the
	// cursor, at most Limit, optionally only one Action.
	AuditList(ctx context.Context, params *AuditListParams) ([]*AuditEntry, error)
	// AuditCleanup deletes up to Limit entries written more than
	// OlderThan ago, oldest first, and returns how many it deleted.
	AuditCleanup(ctx context.Context, params *CleanupParams) (int, error)
}

// Limits of an AuditEntry's texts, in bytes. Longer texts are clipped on
// a rune boundary by Normalize.
const (
	MaxAuditWho      = 200
	MaxAuditAction   = 32
	MaxAuditSelector = 32
	MaxAuditFilter   = 4000
	MaxAuditError    = 2000
)

// MaxAuditPageSize is the largest AuditListParams.Limit.
const MaxAuditPageSize = 1000

// Audit selectors: how an action chose its dead letters.
const (
	AuditSelectorIDs    = "ids"
	AuditSelectorFilter = "filter"
	AuditSelectorAll    = "all"
	AuditSelectorGroup  = "group"
)

// AuditEntry is a row of the audit table.
type AuditEntry struct {
	// ID is assigned by the database on append, increasing: the listing
	// order and the cursor.
	ID int64
	// At is when the row was written, on the database clock.
	At time.Time
	// Who is the admin token's name ("admin-token") or "cli:<OS user>".
	Who string
	// Action is what was done: retry, resolve, delete, redrive, ...: 1 to
	// MaxAuditAction characters of a-z, 0-9, '.', '_' and '-'.
	Action string
	// Selector says how the dead letters were chosen: ids, filter, all
	// or group (AuditSelectorIDs, ...).
	Selector string
	// Filter is the JSON text of the filter or group, empty when the
	// action named ids (AuditFilterJSON).
	Filter string
	// DryRun is true when the action only counted what it would change.
	DryRun bool
	// Matched counts the dead letters the action selected, Changed those
	// it changed (for a dry run: would change).
	Matched, Changed int64
	// Error is why the action stopped, empty when it completed (NULL in
	// the table).
	Error string
}

// AuditError is the error of AuditEntry.Validate and
// AuditListParams.Validate: the field at fault and why. It matches
// ErrInvalidParams (errors.Is).
type AuditError struct {
	Field, Reason string
}

func (e *AuditError) Error() string { return "audit " + e.Field + ": " + e.Reason }

// Is makes an AuditError match ErrInvalidParams.
func (e *AuditError) Is(target error) bool { return target == ErrInvalidParams }

// ValidAuditAction reports whether a is a valid AuditEntry.Action or
// AuditListParams.Action: 1 to MaxAuditAction characters of a-z, 0-9,
// '.', '_' and '-'.
func ValidAuditAction(a string) bool {
	if len(a) == 0 || len(a) > MaxAuditAction {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Validate checks what cannot be clipped: a valid Action and counts of 0
// or more. It returns an *AuditError.
func (e *AuditEntry) Validate() error {
	if e == nil {
		return &AuditError{"entry", "is nil"}
	}
	if !ValidAuditAction(e.Action) {
		return &AuditError{"Action", fmt.Sprintf("%q must be 1 to %d characters of a-z 0-9 . _ -", clipText(e.Action, 64), MaxAuditAction)}
	}
	if e.Matched < 0 || e.Changed < 0 {
		return &AuditError{"Matched", fmt.Sprintf("counts must not be negative (matched %d, changed %d)", e.Matched, e.Changed)}
	}
	return nil
}

// Normalize makes e's texts storable on every dialect: valid UTF-8
// without NUL (SanitizeText), each clipped to its limit on a rune
// boundary, an over-long filter ending in "…". A dialect calls it before
// writing, after Validate; callers need not.
func (e *AuditEntry) Normalize() {
	e.Who = clipText(e.Who, MaxAuditWho)
	e.Selector = clipText(e.Selector, MaxAuditSelector)
	e.Filter = clipText(e.Filter, MaxAuditFilter)
	e.Error = clipText(e.Error, MaxAuditError)
}

// clipText sanitises s and cuts it to at most n bytes on a rune
// boundary, marking a cut with "…" (3 bytes, within n).
func clipText(s string, n int) string {
	s = SanitizeText(s)
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// AuditListParams are the parameters of AuditLog.AuditList.
type AuditListParams struct {
	// After is the cursor: the ID of the last entry of the previous page.
	// 0 starts at the newest.
	After int64
	// Limit is the page size, 1 to MaxAuditPageSize.
	Limit int
	// Action, when set, keeps only entries of this action.
	Action string
}

// Validate checks p: a limit of 1 to MaxAuditPageSize, a cursor of 0 or
// more, and an empty or valid Action. It returns an *AuditError.
func (p *AuditListParams) Validate() error {
	switch {
	case p == nil:
		return &AuditError{"params", "are nil"}
	case p.Limit < 1 || p.Limit > MaxAuditPageSize:
		return &AuditError{"Limit", fmt.Sprintf("%d must be from 1 to %d", p.Limit, MaxAuditPageSize)}
	case p.After < 0:
		return &AuditError{"After", fmt.Sprintf("%d must not be negative", p.After)}
	case p.Action != "" && !ValidAuditAction(p.Action):
		return &AuditError{"Action", fmt.Sprintf("%q must be 1 to %d characters of a-z 0-9 . _ -", clipText(p.Action, 64), MaxAuditAction)}
	}
	return nil
}

// auditFilter is the JSON form of a DeadLetterFilter in the audit trail,
// the field names of the admin API's filter.
type auditFilter struct {
	Type         string     `json:"type,omitempty"`
	Status       string     `json:"status,omitempty"`
	Key          string     `json:"key,omitempty"`
	Error        string     `json:"error,omitempty"`
	FailedAfter  *time.Time `json:"failed_after,omitempty"`
	FailedBefore *time.Time `json:"failed_before,omitempty"`
	IDs          int        `json:"ids,omitempty"`
	Group        string     `json:"group,omitempty"`
	Route        string     `json:"route,omitempty"`
}

// AuditRedriveJSON renders the selection of a redrive as the Filter of
// its AuditEntry: type, key, processed_after, processed_before (the
// admin API's names) and the number of ids.
func AuditRedriveJSON(p *OutboxRedriveParams) string {
	a := struct {
		Type            string     `json:"type"`
		Key             string     `json:"key,omitempty"`
		ProcessedAfter  *time.Time `json:"processed_after,omitempty"`
		ProcessedBefore *time.Time `json:"processed_before,omitempty"`
		IDs             int        `json:"ids,omitempty"`
	}{Type: p.EventType, Key: p.Key, IDs: len(p.IDs)}
	if t := p.ProcessedAfter.UTC(); !p.ProcessedAfter.IsZero() {
		a.ProcessedAfter = &t
	}
	if t := p.ProcessedBefore.UTC(); !p.ProcessedBefore.IsZero() {
		a.ProcessedBefore = &t
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// AuditSelectorOf is the Selector of an action on the dead letters that
// f selects (selector is AuditSelectorFilter or AuditSelectorAll):
// AuditSelectorGroup when f names a failure group.
func AuditSelectorOf(selector string, f *DeadLetterFilter) string {
	if f != nil && f.Group != "" {
		return AuditSelectorGroup
	}
	return selector
}

// AuditFilterJSON renders f as the Filter of an AuditEntry: a JSON object
// with the admin API's field names (type, status, key, error,
// failed_after, failed_before, group, route; status in lower case), and
// the number of ids when it names some. The admin API and `txbox dlq` both use it, so
// the trail reads the same whoever acted.
func AuditFilterJSON(f *DeadLetterFilter) string {
	if f == nil {
		return "{}"
	}
	a := auditFilter{Type: f.EventType, Key: f.Key, Error: f.ErrorContains, IDs: len(f.IDs), Group: f.Group, Route: f.Route}
	switch f.Status {
	case DeadLetterUnresolved:
		a.Status = "unresolved"
	case DeadLetterResolved:
		a.Status = "resolved"
	default:
		a.Status = f.Status
	}
	if !f.FailedAfter.IsZero() {
		t := f.FailedAfter.UTC()
		a.FailedAfter = &t
	}
	if !f.FailedBefore.IsZero() {
		t := f.FailedBefore.UTC()
		a.FailedBefore = &t
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "{}"
	}
	return string(b)
}
