package store

import (
	"context"
	"fmt"
	"time"

	"github.com/txbox/txbox"
)

// OutboxRedriver is implemented by drivers that can send kept events
// again: the PROCESSED rows a type with a retention keeps until cleanup
// (docs/operations.md, "Redrive from kept events"). Every txbox dialect
// implements it. It is separate from Outbox so that a dialect outside this
// module keeps compiling; callers type-assert.
type OutboxRedriver interface {
	// OutboxRedrive selects one page of PROCESSED rows of one type that
	// match the parameters, in id order after params.After, and unless
	// DryRun sets each back to PENDING for the relay to deliver again:
	// same id, payload, headers and key; attempts 0, due now, lease
	// cleared, last_error and processed_at cleared; on PostgreSQL
	// stream_pos 0, so in WAL mode the table poller (never the stream)
	// takes it, and one NOTIFY per type wakes listening relays when the
	// statement commits. A row that is no longer PROCESSED when it is
	// changed (cleaned up, or redriven by someone else meanwhile) is
	// counted in Matched but not in Changed. Only the page's ids are held
	// in memory, never a payload.
	//
	// On an ordered type a redriven row keeps its place in its key's
	// order (its id, and its Seq where the dialect has one): it is claimed
	// before the key's rows still pending, and after the key's newer rows
	// that were delivered already, which the receiver has therefore seen
	// before it.
	OutboxRedrive(ctx context.Context, params *OutboxRedriveParams) (*OutboxRedriveResult, error)
}

// MaxRedrivePage is the largest Limit of one OutboxRedrive call.
const MaxRedrivePage = 1000

// RedrivePageSize is the page callers use unless they have a reason not
// to.
const RedrivePageSize = 500

// RedriveSampleIDs is how many ids OutboxRedriveResult.Sample holds at
// most.
const RedriveSampleIDs = 100

// OutboxRedriveParams are the parameters of OutboxRedriver.OutboxRedrive.
type OutboxRedriveParams struct {
	// EventType is required: a redrive never spans types, whose
	// retention and destinations differ.
	EventType string
	// Key, when not empty, keeps only the rows of this key.
	Key string
	// ProcessedAfter and ProcessedBefore bound processed_at (when the
	// destination acknowledged the row) as a half-open interval,
	// exactly as DeadLetterFilter.FailedAfter and FailedBefore bound
	// failed_at: After inclusive, Before exclusive, compared in UTC with
	// the stored precision (FilterBound), each within MinFilterTime and
	// MaxFilterTime. Zero leaves the side open.
	ProcessedAfter  time.Time
	ProcessedBefore time.Time
	// IDs, when not empty, keeps only these rows; at most MaxFilterIDs.
	IDs []txbox.ID
	// After is the keyset cursor: only rows with a greater id. The zero
	// ID starts at the lowest. Pass the previous page's Last.
	After txbox.ID
	// Limit is the page size, 1 to MaxRedrivePage.
	Limit int
	// DryRun selects and counts, and changes nothing.
	DryRun bool
}

// Validate checks p before a dialect renders it. Errors match
// ErrInvalidParams; a *FilterError names the field at fault.
func (p *OutboxRedriveParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: outbox redrive needs parameters", ErrInvalidParams)
	}
	if p.EventType == "" {
		return &FilterError{"EventType", "required"}
	}
	if p.Limit < 1 || p.Limit > MaxRedrivePage {
		return &FilterError{"Limit", fmt.Sprintf("%d, must be 1 to %d", p.Limit, MaxRedrivePage)}
	}
	if len(p.IDs) > MaxFilterIDs {
		return &FilterError{"IDs", fmt.Sprintf("%d ids, at most %d", len(p.IDs), MaxFilterIDs)}
	}
	for _, b := range []struct {
		name string
		t    time.Time
	}{{"ProcessedAfter", p.ProcessedAfter}, {"ProcessedBefore", p.ProcessedBefore}} {
		if b.t.IsZero() {
			continue
		}
		if r := filterTimeProblem(b.t); r != "" {
			return &FilterError{b.name, r}
		}
	}
	return nil
}

// OutboxRedriveResult reports one OutboxRedrive call.
type OutboxRedriveResult struct {
	// Matched counts the PROCESSED rows the page selected (at most
	// Limit). A full page (Matched == Limit) may have more after it.
	Matched int
	// Changed counts the rows set back to PENDING; 0 for a dry run.
	Changed int
	// Last is the id of the page's last row, the After of the next page;
	// zero when the page was empty.
	Last txbox.ID
	// Sample holds the first RedriveSampleIDs ids of the page.
	Sample []txbox.ID
	// Oldest and Newest are the earliest and latest processed_at of the
	// page's rows; zero when the page was empty.
	Oldest, Newest time.Time
}

// Add records one selected row, in page order, in r.
func (r *OutboxRedriveResult) Add(id txbox.ID, processedAt time.Time) {
	r.Matched++
	r.Last = id
	if len(r.Sample) < RedriveSampleIDs {
		r.Sample = append(r.Sample, id)
	}
	if processedAt.IsZero() {
		return
	}
	if r.Oldest.IsZero() || processedAt.Before(r.Oldest) {
		r.Oldest = processedAt
	}
	if processedAt.After(r.Newest) {
		r.Newest = processedAt
	}
}
