package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// Parked tenants (docs/multi-tenant.md, "Idle tenants"): a relay that
// serves many tenants stops the relay of a tenant with nothing to do and
// watches its tables instead, with the other parked tenants of the same
// database, from one connection: it LISTENs on every parked tenant's
// wake-up channel and, every interval, runs one sweep that asks every
// parked tenant's tables at once whether anything needs a relay (rows
// due soon, leases running out, FAILED rows, rows past their cleanup
// TTL). A parked tenant costs no connection of its own and no
// transaction of its own.

// ParkedTables names one parked tenant's tables and what its cleanup
// would delete: with Cleanup, rows older than a TTL wake the tenant so
// that its relay deletes them.
type ParkedTables struct {
	// Key names the tenant; ParkedWatchConfig.Wake receives it.
	Key string
	// Schema and TablePrefix are the tenant's, as in Config.
	Schema, TablePrefix string
	// Cleanup says the tenant's relay runs the cleanup job
	// (relay.CleanupConfig.Disabled is false): the sweep then also looks
	// for rows past OutboxTTL, DeadLetterTTL and AuditTTL.
	Cleanup bool
	// OutboxTTL, DeadLetterTTL and AuditTTL are the tenant's cleanup
	// TTLs (relay.CleanupConfig).
	OutboxTTL, DeadLetterTTL, AuditTTL time.Duration
}

// ParkedWatchConfig configures a ParkedWatch.
type ParkedWatchConfig struct {
	// ConnConfig reaches the database. Required.
	ConnConfig *pgx.ConnConfig
	// Interval is the time between two sweeps, and the horizon of a
	// sweep: rows due within it wake their tenant. Defaults to 30s.
	Interval time.Duration
	// Wake is called, on the watch's goroutine, with the key of a parked
	// tenant that has work: a notification on its channel, or a sweep
	// that found rows. It should return quickly. Required.
	Wake func(key string)
	// Logger receives the watch's diagnostics. Defaults to slog.Default().
	Logger *slog.Logger
}

// parkedChunk bounds the tenants of one sweep statement, so that a
// thousand schemas do not make one statement of a megabyte; the
// statements of one sweep go as one batch, in one implicit transaction.
const parkedChunk = 250

// parkedWatched is one watched tenant.
type parkedWatched struct {
	ParkedTables
	channel string
	// exists is the tenant's sweep condition (an SQL boolean).
	exists string
	// done receives the result of the Watch that added it.
	done chan error
}

// errUnwatched answers a Watch that an Unwatch of the same key replaced
// before the run loop applied it.
var errUnwatched = errors.New("postgres: unwatched before the watch was in place")

// ParkedWatch watches the parked tenants of one database from one
// connection. Its methods are safe for concurrent use.
type ParkedWatch struct {
	cfg   ParkedWatchConfig
	log   *slog.Logger
	sweep chan struct{}
	// changed signals that pending has changes.
	changed chan struct{}

	mu sync.Mutex
	// pending are the changes the run loop has yet to apply, the last
	// one per key: a tenant to watch, or nil to unwatch it.
	pending map[string]*parkedWatched
	err     string
	watched int
}

// NewParkedWatch returns a ParkedWatch; Run runs it.
func NewParkedWatch(cfg ParkedWatchConfig) (*ParkedWatch, error) {
	if cfg.ConnConfig == nil || cfg.Wake == nil {
		return nil, errors.New("postgres: ParkedWatchConfig.ConnConfig and Wake are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &ParkedWatch{cfg: cfg, log: cfg.Logger.With(slog.String("component", "txbox.parked")),
		sweep: make(chan struct{}, 1), changed: make(chan struct{}, 1), pending: map[string]*parkedWatched{}}, nil
}

// Watch adds a parked tenant: it returns once the LISTEN on the tenant's
// channel is in place, so that a notification sent after Watch returns
// wakes it. An error (the database unreachable within ctx) means the
// tenant is not watched and must not be parked.
func (w *ParkedWatch) Watch(ctx context.Context, t ParkedTables) error {
	tables, err := store.NewTables(t.Schema, t.TablePrefix)
	if err != nil {
		return err
	}
	pw := &parkedWatched{ParkedTables: t, channel: channelName(tables), exists: parkedCondition(tables, t), done: make(chan error, 1)}
	w.change(t.Key, pw)
	select {
	case err := <-pw.done:
		return err
	case <-ctx.Done():
		w.change(t.Key, nil) // a watch that may come later: take it back
		return ctx.Err()
	}
}

// Unwatch removes a tenant (woken, or gone). It does not wait: the
// changes of one key apply in the order they were asked for.
func (w *ParkedWatch) Unwatch(key string) { w.change(key, nil) }

// change queues a change of key for the run loop.
func (w *ParkedWatch) change(key string, pw *parkedWatched) {
	w.mu.Lock()
	if old := w.pending[key]; old != nil {
		old.done <- errUnwatched
	}
	w.pending[key] = pw
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// takePending returns the queued changes.
func (w *ParkedWatch) takePending() map[string]*parkedWatched {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = map[string]*parkedWatched{}
	return p
}

// SweepSoon asks for a sweep now rather than at the next interval: after
// a tenant was parked, for the rows its relay left or that came while it
// stopped. Requests coalesce.
func (w *ParkedWatch) SweepSoon() {
	select {
	case w.sweep <- struct{}{}:
	default:
	}
}

// Err is the watch's trouble, "" while it is connected and its last sweep
// ran.
func (w *ParkedWatch) Err() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Watched counts the tenants watched.
func (w *ParkedWatch) Watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.watched
}

func (w *ParkedWatch) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = ""
	if err != nil {
		w.err = err.Error()
	}
}

// Run watches until ctx ends, reconnecting after a lost connection; it
// returns ctx.Err(). While it is disconnected, Watch waits (within its
// ctx) for the connection.
func (w *ParkedWatch) Run(ctx context.Context) error {
	watched := map[string]*parkedWatched{}
	fails := backoff.Streak{Policy: listenBackoff}
	for ctx.Err() == nil {
		err := w.runConn(ctx, watched, fails.Reset)
		if ctx.Err() != nil {
			break
		}
		w.setErr(fmt.Errorf("parked tenants' watch: %w", err))
		wait := fails.Next()
		w.log.Warn("parked tenants' watch lost its connection; reconnecting", slog.Any("error", err), slog.Duration("backoff", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return ctx.Err()
}

// runConn connects, LISTENs on every watched channel, sweeps (the
// notifications of the time without a connection were lost), then
// serves commands, notifications and sweeps until an error.
func (w *ParkedWatch) runConn(ctx context.Context, watched map[string]*parkedWatched, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, w.cfg.ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if len(watched) > 0 {
		var b strings.Builder
		for _, pw := range watched {
			b.WriteString("LISTEN " + pgx.Identifier{pw.channel}.Sanitize() + ";")
		}
		if _, err := conn.Exec(ctx, b.String()); err != nil {
			return err
		}
	}
	connected()
	if err := w.sweepAll(ctx, conn, watched); err != nil {
		return err
	}
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	// soon fires parkedSweepDelay after a SweepSoon: the requests of a
	// burst of parkings (a relay's start parks every tenant) make one
	// sweep, and the watches they wait for are applied meanwhile.
	var soon <-chan time.Time
	for {
		asked, swept, err := w.serve(ctx, conn, watched, tick.C, soon)
		if err != nil {
			return err
		}
		if swept {
			soon = nil
		}
		if asked && soon == nil {
			soon = time.After(parkedSweepDelay)
		}
	}
}

// parkedSweepDelay is how long after a SweepSoon its sweep runs.
const parkedSweepDelay = 250 * time.Millisecond

// serve applies the queued changes, then waits for one thing (a change,
// a sweep's time, a SweepSoon, a notification) and handles it. It
// reports a SweepSoon (asked) and a sweep it ran (swept).
func (w *ParkedWatch) serve(ctx context.Context, conn *pgx.Conn, watched map[string]*parkedWatched, tick, soon <-chan time.Time) (asked, swept bool, err error) {
	if err := w.apply(ctx, conn, watched); err != nil {
		return false, false, err
	}
	wctx, cancel := context.WithCancel(ctx)
	sweep := false
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-w.changed:
		case <-tick:
			sweep = true
		case <-soon:
			sweep = true
		case <-w.sweep:
			asked = true
		case <-stop:
			return
		}
		cancel()
	}()
	n, werr := conn.WaitForNotification(wctx)
	close(stop)
	<-exited // sweep and asked are set before it exits
	cancel()
	if err = werr; err == nil {
		// The goroutine may have taken a change or a sweep meanwhile.
		w.notified(n, watched)
	} else if ctx.Err() != nil {
		return false, false, ctx.Err()
	} else if conn.IsClosed() {
		return false, false, err
	}
	if sweep {
		return asked, true, w.sweepAll(ctx, conn, watched)
	}
	return asked, false, nil
}

// notified wakes the tenant whose channel a notification came on.
func (w *ParkedWatch) notified(n *pgconn.Notification, watched map[string]*parkedWatched) {
	for _, pw := range watched {
		if pw.channel == n.Channel {
			w.cfg.Wake(pw.Key)
		}
	}
}

// apply applies the queued changes in one statement: LISTEN for a
// tenant added, UNLISTEN for one dropped (unless another watched tenant
// shares the channel). When it fails the changes are queued again (a
// later change of the same key wins), and their Watch calls wait on.
func (w *ParkedWatch) apply(ctx context.Context, conn *pgx.Conn, watched map[string]*parkedWatched) error {
	pending := w.takePending()
	if len(pending) == 0 {
		return nil
	}
	listening := map[string]int{}
	for _, o := range watched {
		listening[o.channel]++
	}
	var stmt strings.Builder
	for key, pw := range pending {
		if old, had := watched[key]; had {
			if listening[old.channel]--; listening[old.channel] == 0 {
				stmt.WriteString("UNLISTEN " + pgx.Identifier{old.channel}.Sanitize() + ";")
			}
		}
		if pw != nil {
			if listening[pw.channel]++; listening[pw.channel] == 1 {
				stmt.WriteString("LISTEN " + pgx.Identifier{pw.channel}.Sanitize() + ";")
			}
		}
	}
	if stmt.Len() > 0 {
		if _, err := conn.Exec(ctx, stmt.String()); err != nil {
			w.requeue(pending)
			return err
		}
	}
	for key, pw := range pending {
		if pw == nil {
			delete(watched, key)
		} else {
			watched[key] = pw
		}
	}
	w.mu.Lock()
	w.watched = len(watched)
	w.mu.Unlock()
	// Only now: a Watch that returns sees itself counted by Watched.
	for _, pw := range pending {
		if pw != nil {
			pw.done <- nil
		}
	}
	return nil
}

// requeue queues changes that failed again, unless a later change of the
// same key came meanwhile.
func (w *ParkedWatch) requeue(pending map[string]*parkedWatched) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, p := range pending {
		if _, newer := w.pending[k]; !newer {
			w.pending[k] = p
		} else if p != nil {
			p.done <- errUnwatched
		}
	}
}

// sweepAll asks every watched tenant's tables whether it has work, in one
// batch (one implicit transaction), and wakes those that have. A
// statement that fails (a tenant's tables dropped) is asked again tenant
// by tenant, and a tenant whose own statement fails is woken: its relay
// reports the trouble, and the others are swept.
func (w *ParkedWatch) sweepAll(ctx context.Context, conn *pgx.Conn, watched map[string]*parkedWatched) error {
	if len(watched) == 0 {
		w.setErr(nil)
		return nil
	}
	all := make([]*parkedWatched, 0, len(watched))
	for _, pw := range watched {
		all = append(all, pw)
	}
	// In key order, so that a chunk's statement is the same text from one
	// sweep to the next while the tenants stay: pgx prepares it once, and
	// the server settles on its generic plan (a sweep of 1,000 schemas
	// measured 0.25 s with it, about 1 s planned afresh).
	slices.SortFunc(all, func(a, b *parkedWatched) int { return strings.Compare(a.Key, b.Key) })
	horizon := w.cfg.Interval + 5*time.Second
	var chunks [][]*parkedWatched
	for len(all) > 0 {
		n := min(len(all), parkedChunk)
		chunks = append(chunks, all[:n])
		all = all[n:]
	}
	batch := &pgx.Batch{}
	for _, ch := range chunks {
		batch.Queue(parkedSweepSQL(ch), horizon.Seconds())
	}
	br := conn.SendBatch(ctx, batch)
	var failed [][]*parkedWatched
	for _, ch := range chunks {
		woken, err := w.readSweep(br, ch)
		if err != nil {
			failed = append(failed, ch)
			continue
		}
		for _, k := range woken {
			w.cfg.Wake(k)
		}
	}
	if err := br.Close(); err != nil && len(failed) == 0 {
		return err
	}
	if conn.IsClosed() {
		return errors.New("connection closed during the sweep")
	}
	for _, ch := range failed {
		w.sweepEach(ctx, conn, ch, horizon)
	}
	w.setErr(nil)
	return nil
}

// readSweep reads one chunk's keys with work.
func (w *ParkedWatch) readSweep(br pgx.BatchResults, ch []*parkedWatched) ([]string, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var woken []string
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		if i >= 0 && i < len(ch) {
			woken = append(woken, ch[i].Key)
		}
	}
	return woken, rows.Err()
}

// sweepEach sweeps the tenants of a failed chunk one by one.
func (w *ParkedWatch) sweepEach(ctx context.Context, conn *pgx.Conn, ch []*parkedWatched, horizon time.Duration) {
	for _, pw := range ch {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM ("+parkedSweepSQL([]*parkedWatched{pw})+") s", horizon.Seconds()).Scan(&n)
		if err != nil || n > 0 {
			if err != nil {
				w.log.Warn("parked tenant's sweep failed; waking it", slog.String("tenant", pw.Key), slog.Any("error", err))
			}
			w.cfg.Wake(pw.Key)
		}
	}
}

// parkedSweepSQL is one chunk's sweep: the index in ch of each tenant
// with work. $1 is the horizon in seconds.
func parkedSweepSQL(ch []*parkedWatched) string {
	var b strings.Builder
	for i, pw := range ch {
		if i > 0 {
			b.WriteString("\nUNION ALL ")
		}
		b.WriteString("SELECT " + strconv.Itoa(i) + " WHERE " + pw.exists)
	}
	return b.String()
}

// parkedCondition is a tenant's sweep condition: rows its relay would
// act on within the horizon ($1 seconds). Each EXISTS reads one of the
// partial indexes the relay's own jobs use, so an idle tenant's check
// reads a few index pages.
func parkedCondition(t store.Tables, p ParkedTables) string {
	table := func(name string) string {
		if t.Schema == "" {
			return pgx.Identifier{name}.Sanitize()
		}
		return pgx.Identifier{t.Schema, name}.Sanitize()
	}
	h := "make_interval(secs => $1::float8)"
	ob := table(t.Outbox)
	conds := []string{
		"EXISTS (SELECT 1 FROM " + ob + " WHERE status = 'PENDING' AND due_at <= now() + " + h + ")",
		"EXISTS (SELECT 1 FROM " + ob + " WHERE status = 'IN_PROCESS' AND lease_until <= now() + " + h + ")",
		"EXISTS (SELECT 1 FROM " + ob + " WHERE status = 'FAILED')",
	}
	ttl := func(d time.Duration) string {
		return "now() - make_interval(secs => " + strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + ") + " + h
	}
	if p.Cleanup {
		conds = append(conds,
			"EXISTS (SELECT 1 FROM "+ob+" WHERE status = 'PROCESSED' AND processed_at <= "+ttl(p.OutboxTTL)+")",
			"EXISTS (SELECT 1 FROM "+table(t.DeadLetter)+" WHERE status = 'RESOLVED' AND resolved_at <= "+ttl(p.DeadLetterTTL)+")",
			"EXISTS (SELECT 1 FROM "+table(t.Audit)+" WHERE at <= "+ttl(p.AuditTTL)+")")
	}
	return strings.Join(conds, "\n  OR ")
}
