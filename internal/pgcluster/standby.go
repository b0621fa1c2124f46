package pgcluster

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions configure a streaming standby.
type StandbyOptions struct {
	// Name is the standby's application_name, and its physical slot on
	// the primary is Name + "_slot". Lower-case letters, digits and
	// underscores. Defaults to "standby1", "standby2", ... in the order
	// the primary's standbys are added.
	Name string
	// Synchronous names the standby in the primary's
	// synchronous_standby_names (FIRST 1 of its synchronous standbys), so
	// that a commit returns once the standby has flushed it. Defaults to
	// false: an asynchronous standby.
	Synchronous bool
	// FailoverSlots sets the standby up to receive the primary's logical
	// slots made with failover = true (PostgreSQL 17+):
	// sync_replication_slots = on and hot_standby_feedback = on on the
	// standby, whose primary_conninfo names a database for the slot sync
	// worker, and the standby's physical slot in the primary's
	// synchronized_standby_slots, so that no logical walsender of a
	// failover slot sends what this standby has not flushed. Defaults to
	// false.
	FailoverSlots bool
}

var validName = regexp.MustCompile(`^[a-z0-9_]{1,50}$`)

// slot returns the standby's physical slot on its primary.
func (o StandbyOptions) slot() string { return o.Name + "_slot" }

// replicationSettings are the settings of n's place in the cluster: a
// standby's connection to its primary, a primary's synchronous standbys
// and the standby slots its failover slots wait for.
func (n *Node) replicationSettings() map[string]string {
	n.mu.Lock()
	o, upstream, standbys := n.standby, n.upstream, slices.Clone(n.standbys)
	n.mu.Unlock()
	s := map[string]string{}
	if o != nil {
		s["primary_conninfo"] = fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s dbname=postgres",
			upstream.Port(), o.Name)
		s["primary_slot_name"] = o.slot()
		if o.FailoverSlots {
			s["sync_replication_slots"] = "on"
		}
	}
	var sync, slots []string
	for _, sb := range standbys {
		so := sb.standbyOf(n)
		if so == nil {
			continue // promoted, or following another primary
		}
		if so.Synchronous {
			sync = append(sync, `"`+so.Name+`"`)
		}
		if so.FailoverSlots {
			slots = append(slots, so.slot())
		}
	}
	if len(sync) > 0 {
		s["synchronous_standby_names"] = "FIRST 1 (" + strings.Join(sync, ", ") + ")"
	}
	if len(slots) > 0 {
		s["synchronized_standby_slots"] = strings.Join(slots, ",")
	}
	return s
}

// standbyOf returns n's standby options when n streams from primary.
func (n *Node) standbyOf(primary *Node) *StandbyOptions {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.upstream != primary {
		return nil
	}
	return n.standby
}

// AddStandby builds a streaming standby of primary from a hot backup
// (pg_backup_start, a copy of the data directory, pg_backup_stop's
// backup_label), with a physical slot on the primary that keeps the WAL
// it needs from before the backup on, starts it, and returns it once the
// primary reports it streaming (and synchronous, with
// opts.Synchronous). The primary keeps running throughout.
func AddStandby(t testing.TB, primary *Node, opts StandbyOptions) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	s, err := primary.addStandby(ctx, opts)
	if s != nil {
		cleanup(t, s)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (n *Node) addStandby(ctx context.Context, opts StandbyOptions) (*Node, error) {
	if opts.Name == "" {
		n.mu.Lock()
		n.standbyNo++
		opts.Name = fmt.Sprintf("standby%d", n.standbyNo)
		n.mu.Unlock()
	}
	if !validName.MatchString(opts.Name) {
		return nil, fmt.Errorf("pgcluster: standby name %q: want lower-case letters, digits and underscores", opts.Name)
	}
	s, err := newNode(n.Version, opts.Name, n.opts)
	if err != nil {
		return nil, err
	}
	if _, err := n.exec(ctx, "postgres", `SELECT pg_create_physical_replication_slot($1, true)`, opts.slot()); err != nil {
		return s, fmt.Errorf("pgcluster: create the slot of %s: %w", opts.Name, err)
	}
	if err := n.hotBackup(ctx, s); err != nil {
		return s, err
	}
	if err := s.writeFile("data/standby.signal", ""); err != nil {
		return s, err
	}
	s.mu.Lock()
	s.standby, s.upstream = &opts, n
	s.mu.Unlock()
	if err := s.start(ctx); err != nil {
		return s, err
	}
	n.mu.Lock()
	n.standbys = append(n.standbys, s)
	n.mu.Unlock()
	if err := n.reload(ctx); err != nil {
		return s, err
	}
	return s, n.waitStreaming(ctx, opts)
}

// hotBackup copies n's data directory into s's between pg_backup_start
// and pg_backup_stop, on one session as the non-exclusive backup wants,
// and writes the backup_label (and tablespace_map) that pg_backup_stop
// returns: what pg_basebackup does, without it.
func (n *Node) hotBackup(ctx context.Context, s *Node) error {
	c, err := pgx.Connect(ctx, n.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: backup of %s: %w", n.Name, err)
	}
	defer c.Close(context.Background())
	// fast: an immediate checkpoint, rather than a spread one.
	if _, err := c.Exec(ctx, `SELECT pg_backup_start($1, fast => true)`, "pgcluster "+s.Name); err != nil {
		return fmt.Errorf("pgcluster: pg_backup_start on %s: %w", n.Name, err)
	}
	if err := copyDataDir(n.DataDir(), s.DataDir(), s.owner); err != nil {
		return fmt.Errorf("pgcluster: copy %s's data directory: %w", n.Name, err)
	}
	var label, spcmap string
	// wait_for_archive false: nothing archives WAL here; the standby
	// streams it through its slot.
	err = c.QueryRow(ctx, `SELECT labelfile, coalesce(spcmapfile, '') FROM pg_backup_stop(wait_for_archive => false)`).Scan(&label, &spcmap)
	if err != nil {
		return fmt.Errorf("pgcluster: pg_backup_stop on %s: %w", n.Name, err)
	}
	if err := s.writeFile("data/backup_label", label); err != nil {
		return err
	}
	if spcmap != "" {
		return s.writeFile("data/tablespace_map", spcmap)
	}
	return nil
}

// reload rewrites n's settings and has the server reload them.
func (n *Node) reload(ctx context.Context) error {
	if err := n.writeConf(); err != nil {
		return err
	}
	if _, err := n.exec(ctx, "postgres", `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("pgcluster: reload %s: %w", n.Name, err)
	}
	return nil
}

// waitStreaming waits until n's pg_stat_replication shows the standby
// opts streaming, and synchronous when opts.Synchronous.
func (n *Node) waitStreaming(ctx context.Context, opts StandbyOptions) error {
	want := "state = 'streaming'"
	if opts.Synchronous {
		want += " AND sync_state IN ('sync', 'potential', 'quorum')"
	}
	return poll(ctx, fmt.Sprintf("%s streaming to %s (%s)", n.Name, opts.Name, want), func(ctx context.Context) (bool, error) {
		var ok bool
		err := n.queryRow(ctx, "postgres", `SELECT count(*) > 0 FROM pg_stat_replication WHERE application_name = $1 AND `+want, []any{opts.Name}, &ok)
		return ok, err
	})
}

// poll calls cond every 20ms until it reports true or ctx ends; then
// it returns an error naming what it waited for and cond's last error.
func poll(ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) error {
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: waiting for %s: %v (last error: %v)", what, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond): // polling with ctx's deadline
		}
	}
}

// waitT is poll for a test, bounded by WaitTimeout.
func waitT(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := poll(ctx, what, cond); err != nil {
		t.Fatal(err)
	}
}

// WaitCaughtUp waits until standby has replayed the WAL that primary had
// written when it was called (pg_last_wal_replay_lsn on the standby at
// or past pg_current_wal_lsn on the primary): what was committed on the
// primary before is visible on the standby.
func WaitCaughtUp(t testing.TB, primary, standby *Node) {
	t.Helper()
	var target string
	primary.QueryRow(t, "postgres", `SELECT pg_current_wal_lsn()::text`, nil, &target)
	waitT(t, standby.Name+" replaying "+primary.Name+"'s WAL up to "+target, func(ctx context.Context) (bool, error) {
		var ok bool
		err := standby.queryRow(ctx, "postgres", `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, []any{target}, &ok)
		return ok, err
	})
}

// Promote promotes standby (pg_promote) and waits until it accepts
// writes. It is then a primary: a later AddStandby may follow it.
func Promote(t testing.TB, standby *Node) {
	t.Helper()
	var ok bool
	standby.QueryRow(t, "postgres", `SELECT pg_promote(wait => true, wait_seconds => 30)`, nil, &ok)
	if !ok {
		t.Fatalf("pgcluster: %s was not promoted within 30s; its log ends:\n%s", standby.Name, standby.logTail(20))
	}
	WaitPromoted(t, standby)
	standby.mu.Lock()
	standby.standby, standby.upstream = nil, nil
	standby.mu.Unlock()
}

// WaitPromoted waits until n is out of recovery (pg_is_in_recovery()
// false): a primary that accepts writes.
func WaitPromoted(t testing.TB, n *Node) {
	t.Helper()
	waitT(t, n.Name+" out of recovery", func(ctx context.Context) (bool, error) {
		var recovering bool
		err := n.queryRow(ctx, "postgres", `SELECT pg_is_in_recovery()`, nil, &recovering)
		return !recovering, err
	})
}

// Slot is a replication slot as a node's pg_replication_slots shows it.
type Slot struct {
	Name string
	// Exists is false when the node has no slot of that name; the other
	// fields are then zero.
	Exists bool
	// Failover: made with failover = true (PostgreSQL 17+).
	Failover bool
	// Synced: a standby's copy made by the slot sync worker.
	Synced bool
	// Temporary: not yet persisted; a synced copy stays so until the
	// primary's slot has passed the standby's catalog xmin and a
	// consistent point, and is dropped at promotion while it is.
	Temporary bool
	// ConfirmedFlush is confirmed_flush_lsn, "" for a physical slot.
	ConfirmedFlush string
}

// Slot returns the slot named name on n.
func (n *Node) Slot(t testing.TB, name string) Slot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	s, err := n.slot(ctx, name)
	if err != nil {
		t.Fatalf("pgcluster: %s: read slot %s: %v", n.Name, name, err)
	}
	return s
}

func (n *Node) slot(ctx context.Context, name string) (Slot, error) {
	s := Slot{Name: name}
	p, err := n.pool(ctx, "postgres")
	if err != nil {
		return s, err
	}
	err = p.QueryRow(ctx, `SELECT failover, synced, temporary, coalesce(confirmed_flush_lsn::text, '')
		FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&s.Failover, &s.Synced, &s.Temporary, &s.ConfirmedFlush)
	if err == pgx.ErrNoRows {
		return s, nil
	}
	s.Exists = err == nil
	return s, err
}
