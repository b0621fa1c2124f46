package relay

import (
	"context"
	"time"

	"github.com/txbox/txbox/store"
)

// batch is one batch of rows as its source hands it to the type's lane
// (relay/lane.go): the rows to send, and the way their
// outcomes are written. Each source has its own: the table source's claim
// modes, chosen once when the poller is made (newPoller), leaseBatch
// (relay/lease.go) and lockBatch (relay/lock.go); the WAL source's
// streamBatch (relay/stream_lane.go). The lane does not ask which.
type batch interface {
	// Rows are the claimed rows, at least one.
	Rows() []*store.OutboxRow
	// Scope is the source's hold on the rows: the batch's sends end when
	// it does, and whatever is unsent then stays so. A claimed batch's
	// never ends (its lease bounds the send); a stream batch's ends with
	// its session (relay/stream.go, lose).
	Scope() context.Context
	// Finish writes the outcomes, one per row (the rows that were not
	// sent included), and gives back whatever the batch holds.
	Finish(items []store.OutboxFinishItem) finishReport
}

// claimFunc claims up to params.Limit rows of one type; a nil batch with
// a nil error means there were none.
type claimFunc func(ctx context.Context, params *store.OutboxClaimParams) (batch, error)

// finishReport is what a batch's Finish did, in the words of its claim
// mode for the log.
type finishReport struct {
	// took is how long the finish ran.
	took time.Duration
	// fenced rows were not the batch's to finish any more; fencedWhy says
	// why, for the log.
	fenced    int
	fencedWhy string
	// err is the finish's error; failedWhy says what becomes of the rows.
	err       error
	failedWhy string
}
