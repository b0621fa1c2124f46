package sqlite

import (
	"context"
	"fmt"

	"github.com/txbox/txbox/store"
)

func validLease(p *store.LeaseParams, needTTL bool) error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil LeaseParams", ErrInvalidParams)
	case p.Name == "":
		return fmt.Errorf("%w: lease Name is empty", ErrInvalidParams)
	case p.Holder == "":
		return fmt.Errorf("%w: lease Holder is empty", ErrInvalidParams)
	case needTTL && p.TTL <= 0:
		return fmt.Errorf("%w: lease TTL must be > 0, got %s", ErrInvalidParams, p.TTL)
	}
	return nil
}

// LeaseAcquire takes or renews the named lease with one upsert whose
// update only applies when the lease expired (on the database clock) or is
// already Holder's; one changed row means Holder holds it.
func (d *Driver) LeaseAcquire(ctx context.Context, params *store.LeaseParams) (bool, error) {
	if err := validLease(params, true); err != nil {
		return false, err
	}
	n, err := d.writeExec(ctx, d.q.leaseAcquire, params.Name, params.Holder, modifier(params.TTL))
	if err != nil {
		return false, fmt.Errorf("lease acquire: %w", err)
	}
	return n == 1, nil
}

// LeaseRelease deletes the named lease if Holder holds it, so another
// instance can take it at once instead of waiting for the TTL.
func (d *Driver) LeaseRelease(ctx context.Context, params *store.LeaseParams) error {
	if err := validLease(params, false); err != nil {
		return err
	}
	if _, err := d.writeExec(ctx, d.q.leaseRelease, params.Name, params.Holder); err != nil {
		return fmt.Errorf("lease release: %w", err)
	}
	return nil
}
