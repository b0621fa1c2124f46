package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox/store"
)

// shapeSlotFailover sets an existing slot's failover flag to want
// (ALTER_REPLICATION_SLOT over a replication connection, PostgreSQL
// 17+). The ALTER waits while a walsender streams the slot, so that
// walsender is ended (the relay streams again on its own, from its last
// confirm) until the ALTER has the slot, up to timeout.
func (d *Driver) shapeSlotFailover(ctx context.Context, want bool, timeout time.Duration, res *StreamSetup) error {
	var cur bool
	err := d.pool.QueryRow(ctx, `SELECT coalesce((to_jsonb(s)->>'failover')::bool, false) FROM pg_replication_slots s WHERE slot_name = $1`, d.wal.Slot).Scan(&cur)
	if err != nil {
		return translate("create stream: read the slot's failover flag", err)
	}
	if cur == want {
		return nil
	}
	rconn, err := d.migrateReplication(ctx)
	if err != nil {
		return err
	}
	defer closeReplication(rconn)
	cmd := fmt.Sprintf("ALTER_REPLICATION_SLOT %s ( FAILOVER %t )", d.wal.Slot, want)
	done := make(chan error, 1)
	go func() {
		_, err := rconn.Exec(context.Background(), cmd).ReadAll()
		done <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var ended []string
	var why string
wait:
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("postgres: create stream: %s: %w", cmd, err)
			}
			break wait
		case <-tick.C:
			// Still waiting: a walsender streams the slot.
			var pid *int32
			if err := d.pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, d.wal.Slot).Scan(&pid); err != nil {
				why = err.Error()
				break
			}
			if pid == nil || *pid == int32(rconn.PID()) {
				break
			}
			if _, err := d.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, *pid); err != nil {
				why = "ending the walsender " + strconv.Itoa(int(*pid)) + ": " + err.Error()
				break
			}
			if p := strconv.Itoa(int(*pid)); !slices.Contains(ended, p) {
				ended = append(ended, p)
			}
		case <-timer.C:
			return d.cancelAlter(rconn, done, fmt.Sprintf("%s did not get the slot within %s (%s)", cmd, timeout, why))
		case <-ctx.Done():
			return d.cancelAlter(rconn, done, fmt.Sprintf("%s: %v", cmd, ctx.Err()))
		}
	}
	res.FailoverChanged = true
	note := fmt.Sprintf("altered the slot %s to failover = %t", d.wal.Slot, want)
	if len(ended) > 0 {
		note += " after ending the walsender (pid " + strings.Join(ended, ", ") + ") of the relay streaming it, which streams again on its own"
	}
	res.Notes = append(res.Notes, note)
	return nil
}

// cancelAlter cancels the ALTER in flight on rconn through the server
// and waits for its answer: an ALTER left waiting would change the slot
// later, behind the caller's back.
func (d *Driver) cancelAlter(rconn *pgconn.PgConn, done <-chan error, why string) error {
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cerr := rconn.CancelRequest(cctx)
	select {
	case err := <-done:
		if err == nil {
			return nil // it got the slot as the cancel went out
		}
		return fmt.Errorf("postgres: create stream: %s: %w", why, err)
	case <-cctx.Done():
		_ = rconn.Conn().Close() // ends the walsender, and its wait
		<-done
		return fmt.Errorf("postgres: create stream: %s; the cancel request got no answer (%v)", why, cerr)
	}
}

// settleFailover gives res its failover verdict. With failover, it first
// makes the standbys' copies usable and waits for them: every 200ms it
// logs a running-transactions record (pg_log_standby_snapshot()) and,
// while no relay streams the slot, moves the slot over the WAL that holds
// nothing for the stream (advanceIdleSlot), which lets its catalog_xmin
// pass the standby's. It stops when every standby of the DSN that is set
// up for it shows its copy synced and persistent, at timeout, or at once
// when the slot has events no relay has delivered (only a relay may move
// the slot past them).
func (d *Driver) settleFailover(ctx context.Context, failover bool, timeout time.Duration, res *StreamSetup) error {
	prober := d.newStandbyProber()
	defer prober.close()
	start := time.Now()
	deadline := start.Add(timeout)
	var held bool
	for {
		if failover {
			var err error
			if held, err = d.nudgeStandbys(ctx, res); err != nil {
				return err
			}
		}
		j, err := d.streamFailover(ctx, prober)
		if err != nil {
			return err
		}
		now := time.Now()
		if !failover || len(j.pending) == 0 || held || now.After(deadline) {
			res.Failover = j.StreamFailover
			if failover {
				res.Waited = now.Sub(start)
			}
			if failover && len(j.pending) > 0 {
				why := "after " + res.Waited.Round(time.Millisecond).String()
				if held {
					why = "and migrate cannot move the slot on (it holds events no relay has delivered yet, or a standby it waits for is down): " +
						"the copy becomes usable once a relay streams and confirms them (check txbox status)"
				}
				res.Warnings = append(res.Warnings, "the copy of the slot on "+strings.Join(j.pending, ", ")+" is not usable yet "+why)
			}
			break
		}
		select {
		case <-ctx.Done():
			return translate("create stream: wait for the standbys", ctx.Err())
		case <-time.After(200 * time.Millisecond): // polling the standbys up to the deadline
		}
	}
	if f := res.Failover; f.Verdict != store.FailoverSafe && f.Verdict != store.FailoverNoStandby {
		res.Warnings = append(res.Warnings, "the slot is not yet failover-safe ("+f.Verdict+"): "+f.Note)
		for _, p := range f.Problems[min(1, len(f.Problems)):] {
			res.Warnings = append(res.Warnings, p)
		}
	}
	return nil
}

// nudgeStandbys logs a running-transactions record for the standbys'
// slot sync and, while no relay streams the slot, moves it over the WAL
// that holds nothing for the stream. It reports whether the slot is held
// back by events no relay has delivered. A role that may not call
// pg_log_standby_snapshot() (superuser only, unless granted) gets a note
// once.
func (d *Driver) nudgeStandbys(ctx context.Context, res *StreamSetup) (held bool, err error) {
	if !slices.Contains(res.Notes, noStandbySnapshotNote) {
		_, err := d.pool.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == codeInsufficientPrivilege:
			res.Notes = append(res.Notes, noStandbySnapshotNote)
		case err != nil:
			return false, translate("create stream: pg_log_standby_snapshot", err)
		}
	}
	// Decoding a failover slot waits for the standbys named in
	// synchronized_standby_slots: one that is down would hold migrate.
	actx, cancel := context.WithTimeout(ctx, advanceTimeout)
	defer cancel()
	held, err = d.advanceIdleSlot(actx)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		res.Notes = append(res.Notes, fmt.Sprintf("could not move the idle slot within %s: a standby named in synchronized_standby_slots may be down", advanceTimeout))
		return true, nil
	}
	return held, err
}

// noStandbySnapshotNote is nudgeStandbys' note for a role that may not
// call pg_log_standby_snapshot().
const noStandbySnapshotNote = "could not call pg_log_standby_snapshot() (permission denied: superuser only unless granted): " +
	"a standby's copy of the slot becomes usable after the server's own next running-transactions record (up to about 30s)"

// migrateReplication opens the replication connection that creating or
// altering the slot runs on, named after the relay's application name
// with "-migrate" so that pg_stat_replication tells it from the stream.
func (d *Driver) migrateReplication(ctx context.Context) (*pgconn.PgConn, error) {
	rconn, err := pgconn.ConnectConfig(ctx, d.replicationConfig(map[string]string{"application_name": d.wal.ApplicationName + "-migrate"}))
	if err != nil {
		return nil, fmt.Errorf("postgres: create stream: replication connection: %w", err)
	}
	return rconn, nil
}

// closeReplication closes rconn within 5 seconds, whatever the caller's
// context: a cancelled create still closes its connection.
func closeReplication(rconn *pgconn.PgConn) {
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rconn.Close(cctx)
}
