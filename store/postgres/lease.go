package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/store"
)

func checkLease(op string, p *store.LeaseParams, needTTL bool) error {
	if p == nil {
		return errBadParams(op, "params are nil")
	}
	if p.Name == "" || p.Holder == "" {
		return errBadParams(op, "lease name and holder are required")
	}
	if needTTL && p.TTL <= 0 {
		return errBadParams(op, "ttl %s must be positive", p.TTL)
	}
	return nil
}

// LeaseAcquire takes or renews the named lease in one upsert that only
// overwrites an expired lease or the holder's own.
func (d *Driver) LeaseAcquire(ctx context.Context, params *store.LeaseParams) (bool, error) {
	if err := checkLease("lease acquire", params, true); err != nil {
		return false, err
	}
	var one int
	// Names and holders come from configuration (the instance id); text
	// columns refuse NUL and invalid UTF-8, so store them sanitised, the
	// same way on acquire and release.
	err := d.pool.QueryRow(ctx, d.q.leaseAcquire, store.SanitizeText(params.Name), store.SanitizeText(params.Holder), params.TTL.Microseconds()).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, d.translate("lease acquire", err)
	}
	return true, nil
}

// LeaseRelease gives the lease up if params.Holder holds it.
func (d *Driver) LeaseRelease(ctx context.Context, params *store.LeaseParams) error {
	if err := checkLease("lease release", params, false); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, d.q.leaseRelease, store.SanitizeText(params.Name), store.SanitizeText(params.Holder)); err != nil {
		return d.translate("lease release", err)
	}
	return nil
}
