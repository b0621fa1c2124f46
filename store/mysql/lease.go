package mysql

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/txbox/txbox/store"
)

// maxLeaseField is the length, in characters, of the lease table's name and
// holder columns (VARCHAR(200)).
const maxLeaseField = 200

func checkLease(p *store.LeaseParams, needTTL bool) error {
	if p == nil {
		return fmt.Errorf("%w: lease params are nil", ErrInvalidParams)
	}
	for _, f := range []struct{ field, v string }{{"Name", p.Name}, {"Holder", p.Holder}} {
		if f.v == "" || !utf8.ValidString(f.v) || utf8.RuneCountInString(f.v) > maxLeaseField {
			return fmt.Errorf("%w: lease %s must be 1..%d characters of valid UTF-8", ErrInvalidParams, f.field, maxLeaseField)
		}
	}
	if needTTL && p.TTL <= 0 {
		return fmt.Errorf("%w: lease TTL must be positive", ErrInvalidParams)
	}
	return nil
}

// LeaseAcquire takes or renews the named lease until now + TTL on the
// database clock. It is an UPDATE that succeeds when the lease expired or is
// already Holder's, then, for a lease never taken, an insert; the primary
// key decides between two instances racing to create it.
func (d *Driver) LeaseAcquire(ctx context.Context, params *store.LeaseParams) (bool, error) {
	if err := checkLease(params, true); err != nil {
		return false, err
	}
	ttl := micros(params.TTL)
	n, err := d.exec(ctx, d.q.leaseUpdate, params.Holder, ttl, params.Name, params.Holder)
	if err != nil {
		return false, wrap("lease acquire", err)
	}
	if n == 1 {
		return true, nil
	}
	n, err = d.exec(ctx, d.q.leaseInsert, params.Name, params.Holder, ttl)
	if err != nil {
		return false, wrap("lease acquire", err)
	}
	if n == 1 {
		return true, nil
	}
	// The UPDATE reports changed rows, not matched ones: a renewal that
	// computed the very same expiry (same microsecond) reports 0. Check.
	var held int
	err = d.db.QueryRowContext(ctx, d.q.leaseHeld, params.Name, params.Holder).Scan(&held)
	if err != nil {
		return false, wrap("lease acquire", err)
	}
	return held == 1, nil
}

// LeaseRelease gives the lease up if Holder holds it, so another instance
// can take it at once instead of waiting for the expiry.
func (d *Driver) LeaseRelease(ctx context.Context, params *store.LeaseParams) error {
	if err := checkLease(params, false); err != nil {
		return err
	}
	_, err := d.exec(ctx, d.q.leaseRelease, params.Name, params.Holder)
	return wrap("lease release", err)
}
