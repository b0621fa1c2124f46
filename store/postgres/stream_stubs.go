package postgres

import (
	"context"
	"errors"

	"github.com/txbox/txbox/store"
)

// Placeholders for the spill side of store.Streamer, so that this branch
// compiles on its own; the spill writes replace this file.

// errStreamSpillMissing is the error of the placeholders.
var errStreamSpillMissing = errors.New("postgres: the stream's spill writes are not built into this driver")

// StreamSpill is not implemented on this branch.
func (d *Driver) StreamSpill(ctx context.Context, items []*store.StreamSpillItem) error {
	return errStreamSpillMissing
}

// StreamSpilledKeys is not implemented on this branch.
func (d *Driver) StreamSpilledKeys(ctx context.Context, after *store.StreamKey, limit int) ([]store.StreamKey, error) {
	return nil, errStreamSpillMissing
}

// StreamStatus is not implemented on this branch.
func (d *Driver) StreamStatus(ctx context.Context) (*store.StreamStatus, error) {
	return nil, errStreamSpillMissing
}
