package postgres

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/store"
)

// Whether the slot survives a failover (docs/operations.md, "Failover").
// PostgreSQL 17+ copies a slot made with failover = true to standbys with
// sync_replication_slots = on; the copy can be used after a promotion
// once it is synced and no longer temporary, and synchronized_standby_slots
// on the primary keeps the slot from confirming WAL those standbys have
// not received. The primary shows the slot's flag, that setting and its
// streaming standbys; only a standby shows its copy, so the driver also
// reads the other hosts of a multi-host DSN (host=a,b) that are in
// recovery.

// minFailoverServerVersion is PostgreSQL 17: failover slots.
const minFailoverServerVersion = 170000

// standbyProbeTimeout bounds the reading of one host of the DSN.
const standbyProbeTimeout = 3 * time.Second

// SQLSTATEs of slot changes: a slot some process uses (ALTER or advance
// of a streamed slot), and a function the role may not call.
const (
	codeObjectInUse           = "55006"
	codeInsufficientPrivilege = "42501"
)

// ErrNotFailoverSafe matches the error of CreateStreamWith with
// RequireFailoverSafe when the slot could not be shown to be
// failover-safe (store.StreamFailover says why).
var ErrNotFailoverSafe = errors.New("postgres: the slot is not failover-safe")

// primaryFailover is what the primary shows of the slot's protection.
type primaryFailover struct {
	version int
	// slotFailover is pg_replication_slots.failover (false before 17, or
	// without the slot).
	slotFailover bool
	// standbySlots is synchronized_standby_slots.
	standbySlots []string
	// physical maps the primary's physical slots to whether they are
	// active.
	physical map[string]bool
	replicas []store.StreamReplica
	// identity tells the primary from the other hosts of the DSN.
	identity string
}

// identitySQL is a server's identity among the hosts of one DSN: two
// servers do not start in the same microsecond on the same port.
const identitySQL = `pg_postmaster_start_time()::text || ' ' || current_setting('port')`

// readPrimaryFailover reads the primary's side.
func (d *Driver) readPrimaryFailover(ctx context.Context) (*primaryFailover, error) {
	pf := &primaryFailover{physical: map[string]bool{}}
	var standbySlots string
	var failover *bool
	// to_jsonb reads the failover column where it exists (17+).
	err := d.pool.QueryRow(ctx, `
SELECT current_setting('server_version_num')::int, coalesce(current_setting('synchronized_standby_slots', true), ''),
       (SELECT coalesce((to_jsonb(s)->>'failover')::bool, false) FROM pg_replication_slots s
        WHERE s.slot_name = $1 AND s.database = current_database()),
       `+identitySQL, d.wal.Slot).Scan(&pf.version, &standbySlots, &failover, &pf.identity)
	if err != nil {
		return nil, translate("failover: read the primary", err)
	}
	pf.slotFailover = failover != nil && *failover
	pf.standbySlots = parseSlotList(standbySlots)
	rows, err := d.pool.Query(ctx, `SELECT slot_name::text, active FROM pg_replication_slots WHERE slot_type = 'physical'`)
	if err != nil {
		return nil, translate("failover: read the physical slots", err)
	}
	var name string
	var active bool
	_, err = pgx.ForEachRow(rows, []any{&name, &active}, func() error {
		pf.physical[name] = active
		return nil
	})
	if err != nil {
		return nil, translate("failover: read the physical slots", err)
	}
	// Physical standbys: walsenders that hold no logical slot (the
	// relays' own) and are past their start (a replication connection
	// that runs commands, such as migrate's). Without pg_read_all_stats
	// the state of another role's walsender reads NULL: it counts.
	rows, err = d.pool.Query(ctx, `
SELECT coalesce(r.application_name, ''), coalesce(r.state, ''), coalesce(r.sync_state, ''), coalesce(ps.slot_name::text, '')
FROM pg_stat_replication r
LEFT JOIN pg_replication_slots ps ON ps.active_pid = r.pid AND ps.slot_type = 'physical'
WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots l WHERE l.active_pid = r.pid AND l.slot_type = 'logical')
  AND (r.state IS NULL OR r.state NOT IN ('startup', 'backup'))
ORDER BY 1, 4`)
	if err != nil {
		return nil, translate("failover: read pg_stat_replication", err)
	}
	var rep store.StreamReplica
	_, err = pgx.ForEachRow(rows, []any{&rep.ApplicationName, &rep.State, &rep.SyncState, &rep.Slot}, func() error {
		pf.replicas = append(pf.replicas, rep)
		return nil
	})
	if err != nil {
		return nil, translate("failover: read pg_stat_replication", err)
	}
	return pf, nil
}

// parseSlotList splits synchronized_standby_slots: names separated by
// commas, double-quoted or folded to lower case as PostgreSQL's
// identifier lists are.
func parseSlotList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case len(part) >= 2 && part[0] == '"' && part[len(part)-1] == '"':
			out = append(out, strings.ReplaceAll(part[1:len(part)-1], `""`, `"`))
		default:
			out = append(out, strings.ToLower(part))
		}
	}
	return out
}

// dsnHost is one host of the pool's DSN.
type dsnHost struct {
	host string
	port uint16
	tls  *tls.Config
}

func (h dsnHost) String() string {
	if strings.HasPrefix(h.host, "/") {
		return h.host + ":" + strconv.Itoa(int(h.port))
	}
	return net.JoinHostPort(h.host, strconv.Itoa(int(h.port)))
}

// dsnHosts returns the hosts of a multi-host DSN (the first one and the
// fallbacks, each once), nil for a DSN of one host: then the primary is
// the only server the driver knows of. A host with a TLS and a plain
// fallback (sslmode=prefer) counts once, with TLS.
func (d *Driver) dsnHosts() []dsnHost {
	cfg := d.pool.Config().ConnConfig
	hosts := []dsnHost{{cfg.Host, cfg.Port, cfg.TLSConfig}}
	for _, fb := range cfg.Fallbacks {
		h := dsnHost{fb.Host, fb.Port, fb.TLSConfig}
		if !slices.ContainsFunc(hosts, func(o dsnHost) bool { return o.host == h.host && o.port == h.port }) {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) < 2 {
		return nil
	}
	return hosts
}

// standbyReading is what one host of the DSN showed.
type standbyReading struct {
	host       string
	err        error
	inRecovery bool
	version    int
	identity   string
	st         store.StreamStandby
}

// slotCopy is a standby's pg_replication_slots row, read as JSON so that
// one query serves every version.
type slotCopy struct {
	Synced             *bool   `json:"synced"`
	Temporary          bool    `json:"temporary"`
	InvalidationReason *string `json:"invalidation_reason"`
	Conflicting        *bool   `json:"conflicting"`
}

// standbyProber reads the hosts of the DSN, keeping one connection to
// each for the reads of one wait (migrate reads them every 200ms).
type standbyProber struct {
	d     *Driver
	mu    sync.Mutex
	conns map[string]*pgx.Conn
}

func (d *Driver) newStandbyProber() *standbyProber {
	return &standbyProber{d: d, conns: map[string]*pgx.Conn{}}
}

// close closes the prober's connections.
func (p *standbyProber) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, c := range p.conns {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Close(ctx)
		cancel()
		delete(p.conns, k)
	}
}

// readAll reads every host at once, each within standbyProbeTimeout.
func (p *standbyProber) readAll(ctx context.Context, hosts []dsnHost) []standbyReading {
	out := make([]standbyReading, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, standbyProbeTimeout)
			defer cancel()
			out[i] = p.read(hctx, h)
		}()
	}
	wg.Wait()
	return out
}

// read reads one host: whether it is in recovery, its settings for slot
// synchronization and its copy of the slot.
func (p *standbyProber) read(ctx context.Context, h dsnHost) standbyReading {
	r := standbyReading{host: h.String()}
	r.st.Host = r.host
	c, err := p.conn(ctx, h)
	if err != nil {
		r.err = err
		return r
	}
	var syncSlots, feedback string
	var conninfo *string
	var cp *slotCopy
	// sync_replication_slots is 17+; primary_conninfo is hidden from a
	// role without pg_read_all_settings (no row in pg_settings).
	err = c.QueryRow(ctx, `
SELECT pg_is_in_recovery(), current_setting('server_version_num')::int, `+identitySQL+`,
       coalesce(current_setting('sync_replication_slots', true), 'off'), current_setting('hot_standby_feedback'),
       current_setting('primary_slot_name'),
       (SELECT setting FROM pg_settings WHERE name = 'primary_conninfo'),
       (SELECT to_jsonb(s) FROM pg_replication_slots s WHERE s.slot_name = $1)`, p.d.wal.Slot).
		Scan(&r.inRecovery, &r.version, &r.identity, &syncSlots, &feedback, &r.st.PrimarySlotName, &conninfo, &cp)
	if err != nil {
		p.drop(h)
		r.err = err
		return r
	}
	r.st.SyncReplicationSlots = syncSlots == "on"
	r.st.HotStandbyFeedback = feedback == "on"
	if conninfo != nil {
		has := conninfoHasDBName(*conninfo)
		r.st.ConninfoDBName = &has
	}
	if cp != nil {
		r.st.SlotExists = true
		r.st.Synced = cp.Synced != nil && *cp.Synced
		r.st.Temporary = cp.Temporary
		if cp.InvalidationReason != nil {
			r.st.Invalidated = *cp.InvalidationReason
		}
	}
	return r
}

// conn returns the prober's connection to h, connecting on first use:
// the pool's settings with h as the only host, and without
// target_session_attrs, which would refuse a standby.
func (p *standbyProber) conn(ctx context.Context, h dsnHost) (*pgx.Conn, error) {
	key := h.String()
	p.mu.Lock()
	c := p.conns[key]
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	cfg := p.d.pool.Config().ConnConfig.Copy()
	cfg.Host, cfg.Port, cfg.TLSConfig = h.host, h.port, h.tls
	cfg.Fallbacks = nil
	cfg.ValidateConnect = nil
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.conns[key] = c
	p.mu.Unlock()
	return c, nil
}

// drop closes the connection to h after an error.
func (p *standbyProber) drop(h dsnHost) {
	p.mu.Lock()
	c := p.conns[h.String()]
	delete(p.conns, h.String())
	p.mu.Unlock()
	if c != nil {
		_ = c.PgConn().Conn().Close()
	}
}

// conninfoHasDBName reports whether a libpq connection string (key=value
// pairs, values optionally single-quoted with backslash escapes, or a
// URI) names a database: the slot sync worker needs one.
func conninfoHasDBName(s string) bool {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		if err != nil {
			return false
		}
		return strings.TrimPrefix(u.Path, "/") != "" || u.Query().Get("dbname") != ""
	}
	space := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	i := 0
	skip := func() {
		for i < len(s) && space(s[i]) {
			i++
		}
	}
	for skip(); i < len(s); skip() {
		k := i
		for i < len(s) && s[i] != '=' && !space(s[i]) {
			i++
		}
		key := s[k:i]
		skip()
		if i >= len(s) || s[i] != '=' {
			return false // not a connection string libpq accepts
		}
		i++
		skip()
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		var val strings.Builder
		for i < len(s) && (quoted && s[i] != '\'' || !quoted && !space(s[i])) {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			val.WriteByte(s[i])
			i++
		}
		if quoted {
			i++ // the closing quote
		}
		if key == "dbname" && val.Len() > 0 {
			return true
		}
	}
	return false
}

// standbyIssues are a standby's problems for the slot: settings the slot
// sync worker needs, and its copy of the slot. pending is true when its
// settings are right and only its copy is missing or temporary, which
// time (and pg_log_standby_snapshot) may fix.
//
// Its copy is judged only when copied is true (a failover slot on the
// primary): a standby has no copy of any other.
func standbyIssues(r standbyReading, slot string, copied bool) (problems []string, pending bool) {
	h, st := r.host, r.st
	if r.version < minFailoverServerVersion {
		return []string{fmt.Sprintf("standby %s is PostgreSQL %s: it cannot keep a copy of the slot (PostgreSQL 17+)", h, versionName(r.version))}, false
	}
	if !st.SyncReplicationSlots {
		problems = append(problems, fmt.Sprintf("sync_replication_slots is off on standby %s: it does not copy the slot", h))
	}
	if !st.HotStandbyFeedback {
		problems = append(problems, fmt.Sprintf("hot_standby_feedback is off on standby %s: its slot sync worker needs it on", h))
	}
	if st.PrimarySlotName == "" {
		problems = append(problems, fmt.Sprintf("primary_slot_name is not set on standby %s: its slot sync worker needs a physical slot on the primary", h))
	}
	if st.ConninfoDBName != nil && !*st.ConninfoDBName {
		problems = append(problems, fmt.Sprintf("primary_conninfo on standby %s names no dbname: its slot sync worker needs one", h))
	}
	settingsOK := len(problems) == 0
	switch {
	case !copied:
	case !st.SlotExists:
		problems = append(problems, fmt.Sprintf("standby %s has no copy of the slot %s", h, slot))
		pending = settingsOK
	case !st.Synced:
		problems = append(problems, fmt.Sprintf("the slot %s on standby %s is not a synced copy of the primary's (made there by hand?)", slot, h))
	case st.Invalidated != "":
		problems = append(problems, fmt.Sprintf("the copy of the slot %s on standby %s is invalidated (%s)", slot, h, st.Invalidated))
	case st.Temporary:
		problems = append(problems, fmt.Sprintf("the copy of the slot %s on standby %s is still temporary, which a promotion drops: it persists once the primary's slot has passed the standby's catalog xmin "+
			"(a streaming relay moves it there; txbox migrate nudges it with pg_log_standby_snapshot())", slot, h))
		pending = settingsOK
	}
	return problems, pending
}

// versionName renders server_version_num 170004 as "17".
func versionName(num int) string { return strconv.Itoa(num / 10000) }

// failoverJudgement is judgeFailover's verdict with what migrate waits
// for: the standbys whose copy is still missing or temporary.
type failoverJudgement struct {
	store.StreamFailover
	pending []string
}

// judgeFailover gives the verdict on what the primary and the hosts of
// the DSN showed. disabled is WALConfig.DisableFailover.
func judgeFailover(slot string, disabled bool, pf *primaryFailover, readings []standbyReading) failoverJudgement {
	j := failoverJudgement{StreamFailover: store.StreamFailover{ServerVersion: pf.version, SlotFailover: pf.slotFailover, Disabled: disabled,
		SynchronizedStandbySlots: pf.standbySlots, Replicas: slices.Clone(pf.replicas)}}
	f := &j.StreamFailover
	standbys := sortReadings(f, pf, readings)
	if pf.version < minFailoverServerVersion {
		lost := fmt.Sprintf("PostgreSQL %s keeps the slot on the primary only (failover slots need PostgreSQL 17): a promotion loses it, and the events emitted since the relay's last confirm",
			versionName(pf.version))
		if len(f.Replicas) == 0 && len(standbys) == 0 {
			f.Verdict, f.Note = store.FailoverNoStandby, "no standby streams from the primary; "+lost
			return j
		}
		f.Verdict, f.Note, f.Problems = store.FailoverUnsafe, lost, []string{lost}
		return j
	}
	if len(f.Replicas) == 0 && len(standbys) == 0 {
		f.Verdict, f.Note = store.FailoverNoStandby, "no standby streams from the primary (pg_stat_replication): there is nothing to promote"
		if !pf.slotFailover {
			f.Note += "; the slot is not a failover slot"
		}
		return j
	}
	primaryProblems(f, pf, slot, disabled)
	verified := map[string]bool{}
	for _, r := range standbys {
		probs, pending := standbyIssues(r, slot, pf.slotFailover)
		if len(probs) == 0 {
			verified[r.st.PrimarySlotName] = true
		}
		if pending {
			j.pending = append(j.pending, r.host)
		}
		f.Problems = append(f.Problems, probs...)
	}
	if len(f.Problems) > 0 {
		f.Verdict, f.Note = store.FailoverUnsafe, f.Problems[0]
		if n := len(f.Problems) - 1; n > 0 {
			f.Note += fmt.Sprintf(" (and %d more)", n)
		}
		return j
	}
	var unverified, names []string
	for _, r := range f.Replicas {
		names = append(names, replicaName(r))
		if !verified[r.Slot] {
			unverified = append(unverified, replicaName(r))
		}
	}
	switch {
	case len(f.Replicas) == 0:
		f.Verdict, f.Note = store.FailoverUnknown, "the standbys of the DSN are set up, but none streams from this primary (pg_stat_replication)"
	case len(unverified) > 0:
		f.Verdict = store.FailoverUnknown
		f.Note = "the primary is set up (a failover slot, synchronized_standby_slots naming every standby), but only a standby shows its copy of the slot, and " +
			strings.Join(unverified, ", ") + " could not be read: list every host in database.dsn (host=primary,standby) or check pg_replication_slots there"
		f.Unchecked = append(f.Unchecked, "the copy of the slot on "+strings.Join(unverified, ", "))
	default:
		f.Verdict = store.FailoverSafe
		f.Note = "a failover slot, synced and persistent on " + strings.Join(names, ", ") + ", which synchronized_standby_slots protects"
	}
	return j
}

// sortReadings puts what the hosts of the DSN showed into f: the
// standbys (returned, to judge), the hosts that did not answer, and the
// hosts that are primaries (this one is left out).
func sortReadings(f *store.StreamFailover, pf *primaryFailover, readings []standbyReading) []standbyReading {
	var standbys []standbyReading
	for _, r := range readings {
		switch {
		case r.err != nil:
			f.Standbys = append(f.Standbys, store.StreamStandby{Host: r.host, Error: r.err.Error()})
			f.Unchecked = append(f.Unchecked, fmt.Sprintf("%s (a host of the DSN) did not answer: %v", r.host, r.err))
		case r.identity == pf.identity:
			// the primary itself
		case !r.inRecovery:
			f.Unchecked = append(f.Unchecked, fmt.Sprintf("%s (a host of the DSN) is not in recovery: another primary, not a standby of this one", r.host))
		default:
			standbys = append(standbys, r)
			f.Standbys = append(f.Standbys, r.st)
		}
	}
	return standbys
}

// primaryProblems adds to f what is wrong on the primary (17+): the slot
// not a failover slot, synchronized_standby_slots unset or naming slots
// that are missing or whose standby is away, and standbys it does not
// protect.
func primaryProblems(f *store.StreamFailover, pf *primaryFailover, slot string, disabled bool) {
	if !pf.slotFailover {
		why := "run txbox migrate, which makes it one"
		if disabled {
			why = "database.wal.failover is false"
		}
		f.Problems = append(f.Problems, "the slot "+slot+" is not a failover slot ("+why+"): a promotion loses it")
	}
	listed := map[string]bool{}
	for _, name := range pf.standbySlots {
		listed[name] = true
		active, ok := pf.physical[name]
		switch {
		case !ok:
			f.Problems = append(f.Problems, fmt.Sprintf("synchronized_standby_slots names %s, which is not a physical slot on the primary: the relay's stream waits for it", name))
		case !active:
			f.Problems = append(f.Problems, fmt.Sprintf("the standby of the physical slot %s (named in synchronized_standby_slots) is not connected: the relay's stream waits for it", name))
		}
	}
	var replicaSlots []string
	for i, r := range f.Replicas {
		f.Replicas[i].Listed = listed[r.Slot]
		name := replicaName(r)
		switch {
		case r.Slot == "":
			f.Problems = append(f.Problems, fmt.Sprintf("standby %s streams without a physical slot: set primary_slot_name on it (its slot sync worker needs one, and synchronized_standby_slots names slots)", name))
		case len(pf.standbySlots) > 0 && !listed[r.Slot]:
			f.Problems = append(f.Problems, fmt.Sprintf("standby %s streams through the slot %s, which synchronized_standby_slots does not name: the slot can confirm WAL that standby has not received, and its promotion loses those events", name, r.Slot))
		}
		if r.Slot != "" {
			replicaSlots = append(replicaSlots, r.Slot)
		}
	}
	if len(pf.standbySlots) == 0 {
		set := "the standbys' physical slots"
		if len(replicaSlots) > 0 {
			set = strings.Join(replicaSlots, ",")
		}
		f.Problems = append(f.Problems, "synchronized_standby_slots is not set on the primary: the slot can confirm WAL a standby has not received, and a promotion of that standby loses those events; set it to "+set)
	}
}

// replicaName names a standby as the primary sees it.
func replicaName(r store.StreamReplica) string {
	switch {
	case r.ApplicationName != "" && r.Slot != "":
		return r.ApplicationName + " (slot " + r.Slot + ")"
	case r.ApplicationName != "":
		return r.ApplicationName
	case r.Slot != "":
		return "slot " + r.Slot
	}
	return "(unnamed)"
}

// streamFailover reads the primary and the other hosts of the DSN with
// prober (a new one closed at once when nil) and judges.
func (d *Driver) streamFailover(ctx context.Context, prober *standbyProber) (failoverJudgement, error) {
	pf, err := d.readPrimaryFailover(ctx)
	if err != nil {
		return failoverJudgement{}, err
	}
	var readings []standbyReading
	if hosts := d.dsnHosts(); hosts != nil {
		if prober == nil {
			prober = d.newStandbyProber()
			defer prober.close()
		}
		readings = prober.readAll(ctx, hosts)
	}
	return judgeFailover(d.wal.Slot, d.wal.DisableFailover, pf, readings), nil
}
