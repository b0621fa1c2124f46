package sqlstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/store"
)

// RedriveSQL is how a dialect writes the selection of one page of an
// outbox redrive (store.OutboxRedriver); Select puts it together the same
// way for every database/sql dialect.
type RedriveSQL struct {
	// Outbox is the quoted outbox table name.
	Outbox string
	// KeyArg is the bound argument of the event_key = ? condition.
	KeyArg func(key string) any
	// Time renders a time as the dialect's processed_at text.
	Time func(t time.Time) string
	// Precision is the resolution processed_at stores: bounds are
	// rounded up to it (store.FilterBound).
	Precision time.Duration
	// InIDs returns the condition id IN (...) with n placeholders.
	InIDs func(n int) string
	// Invalid is the dialect's ErrInvalidParams, which parameters that do
	// not validate wrap.
	Invalid error
}

// Select returns the statement that reads the page's ids and processed_at
// (PROCESSED rows of the type, filtered, with an id above the cursor, in
// id order, at most Limit) and its arguments.
func (q RedriveSQL) Select(p *store.OutboxRedriveParams) (string, []any, error) {
	if err := p.Validate(); err != nil {
		return "", nil, fmt.Errorf("%w: %w", q.Invalid, err)
	}
	conds := []string{"status = 'PROCESSED'", "event_type = ?"}
	args := []any{p.EventType}
	if p.Key != "" {
		conds = append(conds, "event_key = ?")
		args = append(args, q.KeyArg(p.Key))
	}
	if !p.ProcessedAfter.IsZero() {
		conds = append(conds, "processed_at >= ?")
		args = append(args, q.Time(store.FilterBound(p.ProcessedAfter, q.Precision)))
	}
	if !p.ProcessedBefore.IsZero() {
		conds = append(conds, "processed_at < ?")
		args = append(args, q.Time(store.FilterBound(p.ProcessedBefore, q.Precision)))
	}
	if len(p.IDs) > 0 {
		conds = append(conds, q.InIDs(len(p.IDs)))
		for _, id := range p.IDs {
			args = append(args, id.String())
		}
	}
	conds = append(conds, "id > ?")
	args = append(args, p.After.String(), p.Limit)
	return "SELECT id, processed_at FROM " + q.Outbox + " WHERE " + strings.Join(conds, " AND ") + " ORDER BY id LIMIT ?", args, nil
}
