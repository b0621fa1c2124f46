package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// The wal scenario: WAL mode (docs/concepts.md, "WAL mode") against the
// naive loop and the lock claim in one invocation (docs/benchmarks.md,
// "WAL mode").

// walPublishBatch is the events per producer transaction when a backlog is
// produced with the Go publisher: a producer committing batches, so that
// the backlog's WAL is the publisher's (the table mode's INSERT, the WAL
// mode's emit) and not COPY's.
const walPublishBatch = 1000

// walTuned are the database.wal keys of the tuned WAL mode variant: one
// event type may take the whole window, and its batches are twice the
// default (docs/benchmarks.md, "WAL mode").
const walTuned = "lane-queue: 20000\nbatch-size: 2000"

// publishFill produces n events through the Go publisher on a driver of
// the source's schema, walPublishBatch per transaction, and returns the
// WAL position read inside the last transaction before its COMMIT (the
// stream has confirmed the backlog once the slot's confirmed_flush_lsn is
// past it).
func (s *pgSource) publishFill(ctx context.Context, n int, p *progress) (string, error) {
	src := postgres.SourceTable
	if s.wal {
		src = postgres.SourceWAL
	}
	d, err := postgres.New(s.db.pool, postgres.Config{Schema: s.schema, Source: src})
	if err != nil {
		return "", err
	}
	defer d.Close()
	s.slotName = d.WAL().Slot
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		return "", err
	}
	evs := make([]txbox.Event, walPublishBatch)
	headers := map[string]string{"content-type": "application/json"}
	var lsn string
	for done := 0; done < n; {
		k := min(walPublishBatch, n-done)
		for i := range k {
			evs[i] = txbox.Event{Type: benchType, Payload: []byte(benchPayload), Headers: headers}
		}
		err := pgx.BeginFunc(ctx, s.db.pool, func(tx pgx.Tx) error {
			if _, err := pub.Publish(ctx, tx, evs[:k]...); err != nil {
				return err
			}
			var xid int64
			if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text, pg_current_xact_id()::xid::text::bigint").Scan(&lsn, &xid); err != nil {
				return err
			}
			s.xids = append(s.xids, xid)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("publish the backlog: %w", err)
		}
		done += k
		p.count(int64(done), int64(n))
	}
	return lsn, nil
}

// streamLeft is 1 while the source's slot has not confirmed past the last
// produced transaction, 0 after.
func (s *pgSource) streamLeft(ctx context.Context) (int64, error) {
	var behind bool
	err := s.db.pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn < $2::pg_lsn, true) FROM pg_replication_slots WHERE slot_name = $1`,
		s.slotName, s.lastLSN).Scan(&behind)
	if err != nil {
		return 0, fmt.Errorf("read the slot %s: %w", s.slotName, err)
	}
	if behind {
		return 1, nil
	}
	return 0, nil
}

// spilledRows counts the rows ever inserted into the outbox table: in WAL
// mode with nothing produced into the table, the events the relay
// spilled. Read once the relay has exited (its sessions' statistics are
// flushed at exit); it waits a second for the server's statistics to
// settle.
func (s *pgSource) spilledRows(ctx context.Context) (int64, error) {
	ins, _, err := s.rowWrites(ctx)
	return ins, err
}

// rowWrites counts the rows ever inserted into the outbox table, and the
// rows ever updated or deleted in it, read as spilledRows reads them.
func (s *pgSource) rowWrites(ctx context.Context) (inserted, changed int64, err error) {
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(1100 * time.Millisecond):
	}
	err = s.db.pool.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd + n_tup_del), 0)
		FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'txbox_outbox'`, s.schema).Scan(&inserted, &changed)
	return inserted, changed, err
}

// dropSlot drops the source's slot (txbox migrate created it) before the
// schema goes, through the driver's DropStream.
func (s *pgSource) dropSlot() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := postgres.New(s.db.pool, postgres.Config{Schema: s.schema, Source: postgres.SourceWAL})
	if err != nil {
		return
	}
	defer d.Close()
	dropStream(ctx, d)
}

// createStream creates the publication and the slot of a WAL mode driver
// (what `txbox migrate` does after the tables).
func createStream(ctx context.Context, d store.Driver) (*postgres.Driver, error) {
	pd, ok := d.(*postgres.Driver)
	if !ok {
		return nil, fmt.Errorf("WAL mode needs the PostgreSQL driver, not %T", d)
	}
	if err := pd.CreateStream(ctx, time.Minute); err != nil {
		return nil, err
	}
	return pd, nil
}

// dropStream drops d's slot, retrying for a minute while its walsender is
// still exiting (a slot left behind keeps WAL for ever), then its
// publication, which DropStream leaves and DROP SCHEMA does not remove.
func dropStream(ctx context.Context, d *postgres.Driver) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if err := d.DropStream(ctx); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, _ = d.Pool().Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{d.WAL().Publication}.Sanitize())
}

// walLSN reads the server's current WAL position.
func (d *db) walLSN(ctx context.Context) (string, error) {
	var lsn string
	err := d.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	return lsn, err
}

// walBytes is the WAL written between two positions.
func (d *db) walBytes(ctx context.Context, from, to string) (float64, error) {
	var n float64
	err := d.pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::float8", from, to).Scan(&n)
	return n, err
}

func (r *runner) scenarioWAL(ctx context.Context, s *Scenario) error {
	s.Title = "WAL mode: drain, pickup, CPU and WAL bytes against the naive loop and the lock claim"
	s.Measures = "Drain: a backlog drained to NATS by the naive loop (its own table, COPY), by `txbox relay` with the lock claim " +
		"(table mode, defaults) and by `txbox relay` in WAL mode (`database.source: wal`, defaults: window 20,000). Both relays' backlogs " +
		"are produced by the Go publisher, 1,000 events per transaction, with no relay running (WAL mode: the slot in place, the WAL keeps them); " +
		"the clock runs from the relay's start until NATS holds every message; the drain is settled when the table holds nothing " +
		"undelivered (and, WAL mode, the slot confirmed past the last transaction). WAL bytes over the production and over the drain: " +
		"the run's own records read back with pg_walinspect (the producing transactions', those touching the schema's relations, and the " +
		"commits of their transactions), and the cluster's pg_current_wal_lsn() difference (other sessions' WAL included). Pickup: the Go publisher at a fixed rate, one event per " +
		"transaction, synchronous_commit = on, relay in this process, lock claim vs WAL mode."
	sizes := make([]string, len(r.o.WALBacklogs))
	for i, n := range r.o.WALBacklogs {
		sizes[i] = strconv.Itoa(n)
	}
	s.Conditions = map[string]string{"backlogs": strings.Join(sizes, ", "), "rounds": strconv.Itoa(r.o.Rounds), "senders": strings.Join(r.o.Senders, ", "),
		"payload": strconv.Itoa(len(benchPayload)) + " bytes JSON + content-type header", "pickup rate": strconv.Itoa(r.o.WALRate) + " events/s",
		"order":                   "naive, lock claim, WAL mode (, WAL mode tuned), naive loop without a database; reversed every other round",
		"naive loop, no database": "the naive loop's client, messages and batches (4 workers × 500, wait for every ack) with its rows made in memory: what the loop would reach if claiming cost nothing"}
	if r.o.WALTuned {
		s.Conditions["WAL mode tuned"] = "`database.wal.lane-queue: 20000` (the window), `database.wal.batch-size: 2000`"
	}
	for _, n := range r.o.WALBacklogs {
		for _, snd := range r.o.Senders {
			if err := r.walDrains(ctx, s, n, snd); err != nil {
				return err
			}
		}
	}
	lock := pickupOpts{name: "Go publisher, lock claim", rate: r.o.WALRate, syncCommit: true}
	wal := pickupOpts{name: "Go publisher, WAL mode", rate: r.o.WALRate, syncCommit: true, wal: true}
	var p50 [2]float64
	for i, po := range []pickupOpts{lock, wal} {
		pick, ack, err := r.pickupRun(ctx, po)
		if err != nil {
			return fmt.Errorf("pickup %s: %w", po.name, err)
		}
		s.Latencies = append(s.Latencies, pick, ack)
		p50[i] = pick.P50
		if po.wal {
			s.addRatio(po.name+": pickup p50 / 2 ms", pick.Name, "target 2 ms", []float64{pick.P50}, []float64{2}, false,
				"≤ 1 (p50 ≤ 2 ms)", func(x float64) bool { return x <= 1 })
		}
	}
	s.addRatio("pickup p50: WAL mode / lock claim", wal.name+" → sender", lock.name+" → sender", []float64{p50[1]}, []float64{p50[0]}, false, "", nil)
	return nil
}

// walDrains runs the paired drains of one backlog size to one sender:
// the naive loop, the lock claim, WAL mode (and WAL mode tuned) and the
// naive loop without a database, and adds their ratios.
func (r *runner) walDrains(ctx context.Context, s *Scenario, n int, snd string) error {
	label := strconv.Itoa(n)
	if snd != "nats" {
		label += " " + snd
	}
	naive := drainSpec{variant: label + " naive loop", sender: snd, n: n, naive: true}
	lock := drainSpec{variant: label + " relay lock claim", sender: snd, n: n, relays: 1, settings: relayLock, publish: true}
	wal := drainSpec{variant: label + " relay WAL mode", sender: snd, n: n, relays: 1, publish: true, wal: true}
	specs := []drainSpec{naive, lock, wal}
	if r.o.WALTuned {
		specs = append(specs, drainSpec{variant: label + " relay WAL mode tuned", sender: snd, n: n, relays: 1, publish: true, wal: true,
			walSettings: walTuned})
	}
	broker := drainSpec{variant: label + " naive loop, no database", sender: snd, n: n, naive: true, brokerOnly: true}
	if err := r.pairedDrains(ctx, s, append(specs, broker)); err != nil {
		return err
	}
	ratio := func(name string, a, b drainSpec, target string, meets func(float64) bool) {
		s.addRatio(label+": "+name, a.variant, b.variant, s.rates(a.variant), s.rates(b.variant), true, target, meets)
	}
	ratio("WAL mode / naive loop", wal, naive, "≥ 2.0×", func(x float64) bool { return x >= 2.0 })
	ratio("WAL mode / lock claim", wal, lock, "≥ 1.5×", func(x float64) bool { return x >= 1.5 })
	ratio("WAL mode / naive loop, no database", wal, broker, "", nil)
	ratio("naive loop / naive loop, no database", naive, broker, "", nil)
	vs := []string{wal.variant, lock.variant, naive.variant}
	if r.o.WALTuned {
		ratio("WAL mode tuned / naive loop", specs[3], naive, "", nil)
		ratio("WAL mode tuned / WAL mode", specs[3], wal, "", nil)
		vs = append(vs, specs[3].variant)
	}
	r.addCPUNote(s, vs...)
	for _, v := range specs[1:] {
		s.Notes = append(s.Notes, walNote(s, v))
	}
	return nil
}

// walNote is a relay variant's memory, WAL and spill figures: the medians
// of the runs that have each, "n/a" where the WAL meter could not read it.
func walNote(s *Scenario, v drainSpec) string {
	med := func(key string) string {
		var xs []float64
		for _, run := range s.Runs {
			if x, ok := run.Extra[key]; ok && run.Variant == v.variant {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			return "n/a"
		}
		return strconv.FormatFloat(median(xs), 'f', 0, 64)
	}
	note := fmt.Sprintf("%s: peak RSS %s MiB; WAL per event (medians): the run's own %s bytes produced, %s drained; "+
		"the cluster's %s produced, %s drained (its background %s bytes/s)",
		v.variant, med("max_rss_mib"), med("wal_produce_bytes_per_event"), med("wal_drain_bytes_per_event"),
		med("wal_cluster_produce_bytes_per_event"), med("wal_cluster_drain_bytes_per_event"), med("wal_background_bytes_per_s"))
	if v.wal {
		note += fmt.Sprintf("; %s events spilled into the table", med("spilled"))
	}
	return note
}

// walMeter measures the WAL a drain run writes, per event: over the
// production (from before the fill to after it) and over the drain (from
// the relay's start until the drain settled). Two figures each: the
// cluster's (pg_current_wal_lsn() difference, other sessions included:
// the machine is shared) and the run's own, read back with pg_walinspect
// (the records of the producing transactions, the records touching the
// schema's tables and indexes, and the other records of the transactions
// that wrote those), when the extension can be installed in the run's
// schema. The cluster's background rate over one second before the fill
// is recorded too.
type walMeter struct {
	d                  *db
	src                *pgSource
	fillFrom, fillTo   string
	bgBytes, bgSeconds float64
	inspect            string // schema of pg_walinspect, "" without it
	// ownProduce is the production's own WAL, -1 when it could not be
	// read.
	ownProduce float64
	// note reports what the meter could not read (the figure is then
	// missing from the run).
	note func(format string, args ...any)
}

// startWALMeter installs pg_walinspect, samples the cluster's WAL rate
// for a second, then marks the start of the production.
func (r *runner) startWALMeter(ctx context.Context, src source) (*walMeter, error) {
	ps, ok := src.(*pgSource)
	if !ok {
		return nil, nil
	}
	m := &walMeter{d: r.db, src: ps, note: r.p.note}
	var err error
	if m.inspect, err = r.db.walinspect(ctx, ps.schema); err != nil {
		m.note("  WAL meter: the run's own WAL is not read: %v", err)
	}
	a, err := r.db.walLSN(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Second):
	}
	if m.fillFrom, err = r.db.walLSN(ctx); err != nil {
		return nil, err
	}
	m.bgSeconds = time.Since(start).Seconds()
	if m.bgBytes, err = r.db.walBytes(ctx, a, m.fillFrom); err != nil {
		return nil, err
	}
	return m, nil
}

// walinspect makes pg_walinspect available, in schema unless another
// schema of the database has it already (it is dropped with schema), and
// returns the schema that has it.
func (d *db) walinspect(ctx context.Context, schema string) (string, error) {
	if _, err := d.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA "+schema); err != nil {
		return "", fmt.Errorf("pg_walinspect: %w", err)
	}
	var in string
	err := d.pool.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_walinspect'`).Scan(&in)
	return in, err
}

// filled marks the end of the production (and the drain's start) and
// reads the production's own WAL at once, before a checkpoint can recycle
// it.
func (m *walMeter) filled(ctx context.Context) (err error) {
	if m.fillTo, err = m.d.walLSN(ctx); err != nil || m.inspect == "" {
		return err
	}
	if m.ownProduce, err = m.own(ctx, m.fillFrom, m.fillTo, m.src.xids); err != nil {
		m.note("  WAL meter: the production's own WAL is not read: %v", err)
		m.ownProduce = -1
	}
	return nil
}

// record writes the figures into run once the drain has settled.
func (m *walMeter) record(ctx context.Context, run *Measurement) error {
	end, err := m.d.walLSN(ctx)
	if err != nil {
		return err
	}
	prod, err := m.d.walBytes(ctx, m.fillFrom, m.fillTo)
	if err != nil {
		return err
	}
	drain, err := m.d.walBytes(ctx, m.fillTo, end)
	if err != nil {
		return err
	}
	n := float64(run.Events)
	run.Extra["wal_cluster_produce_bytes_per_event"] = prod / n
	run.Extra["wal_cluster_drain_bytes_per_event"] = drain / n
	run.Extra["wal_background_bytes_per_s"] = m.bgBytes / m.bgSeconds
	if m.inspect == "" {
		return nil
	}
	if m.ownProduce >= 0 {
		run.Extra["wal_produce_bytes_per_event"] = m.ownProduce / n
	}
	own, err := m.own(ctx, m.fillTo, end, nil)
	if err != nil {
		m.note("  WAL meter: the drain's own WAL is not read: %v", err)
		return nil
	}
	run.Extra["wal_drain_bytes_per_event"] = own / n
	return nil
}

// own sums the WAL records between from and to that belong to the run:
// those of the transactions xids, those touching a relation of the
// source's schema (its tables and indexes, full-page images included,
// whatever transaction or none wrote them), and the other records
// (commits) of the transactions that wrote those.
func (m *walMeter) own(ctx context.Context, from, to string, xids []int64) (float64, error) {
	var n float64
	err := m.d.pool.QueryRow(ctx, fmt.Sprintf(`WITH rels AS (
	SELECT '(^|: )rel \d+/\d+/(' || string_agg(pg_relation_filenode(c.oid)::text, '|') || ') ' AS re
	FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND pg_relation_filenode(c.oid) IS NOT NULL),
r AS (SELECT xid::text::bigint AS xid, record_length, coalesce(block_ref, '') ~ (SELECT re FROM rels) AS mine
	FROM %s.pg_get_wal_records_info($2::pg_lsn, $3::pg_lsn)),
x AS (SELECT DISTINCT xid FROM r WHERE mine AND xid <> 0 UNION SELECT unnest($4::bigint[]))
SELECT coalesce(sum(record_length), 0)::float8 FROM r WHERE mine OR xid IN (SELECT xid FROM x)`, pgx.Identifier{m.inspect}.Sanitize()),
		m.src.schema, from, to, xids).Scan(&n)
	return n, err
}
