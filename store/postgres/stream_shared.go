package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// A shared slot (WALConfig.Shared; docs/multi-tenant.md, "WAL mode"): the
// schemas of one database share one replication slot and one publication,
// and in the relay process one replication connection streams it for all
// of them. Each schema's driver gets a view (sharedView, its
// store.Stream) that delivers its own transactions only: every view has
// its own decoder (its message prefix names its schema, and its outbox
// table is its relation), so a transaction that wrote into several
// schemas reaches each of them as a transaction of its own, with the same
// End.
//
// Positions. Each view confirms and persists its own position in its
// schema's wal_state, as a stream of one schema does. The position
// reported to the server (the slot's confirmed_flush_lsn) is the least of:
//   - each attached view's: its persisted position, or the last position
//     the connection read when the view has nothing handed out and
//     unconfirmed (an idle schema does not hold the slot back);
//   - each view waiting to attach: its persisted position;
//   - every other schema whose outbox table is in the publication (a
//     tenant not started yet, stopped, or removed from the list): its
//     persisted position, read from its wal_state (sharedFloor). While a
//     table of the publication has no state row yet (a schema joining
//     the slot), the position does not move.
//
// So no listed tenant loses an event to another's confirm, and a tenant
// that leaves the list holds the slot back at its last position until
// its table leaves the publication (docs/multi-tenant.md says how).
//
// Attaching. A view attaches at a transaction boundary. When the
// connection already read past the view's persisted position, it is
// restarted (closed and started again at the least position of its
// views; each view skips what it already has), which the tenants'
// relays do not see.
//
// Back-pressure: the connection hands each view its transactions through
// a queue of Window transactions, ahead of the view's own window of
// Window handed out and unconfirmed (so a view holds up to twice Window
// transactions). Known weakness: the connection reads in order, so a
// view whose queue is full (a slow or paused destination) stops it for
// every schema of the database until that tenant's relay takes more.

// errRestart is the reader's error when a view must attach behind the
// connection's position: the connection starts again.
var errRestart = errors.New("postgres: shared stream: restarting for a tenant that attaches behind the stream")

// sharedSlots are the process's shared streams by database and slot.
var sharedSlots = struct {
	mu sync.Mutex
	m  map[string]*sharedStream
}{m: map[string]*sharedStream{}}

// sharedKey names the driver's slot in the process: the server, the
// database and the slot.
func (d *Driver) sharedKey() string {
	c := d.pool.Config().ConnConfig
	return fmt.Sprintf("%s:%d/%s/%s", c.Host, c.Port, c.Database, d.wal.Slot)
}

// sharedStream is the replication connection of one shared slot.
type sharedStream struct {
	key  string
	opts store.StreamOptions

	mu sync.Mutex
	// views are the attached views, pending those waiting to attach.
	views, pending []*sharedView
	// pos is the last position the connection read up to between
	// transactions (or its start).
	pos uint64
	// cur is the connection (nil while none is up).
	cur *pgStream
	err error

	// The reader's own: the relations the connection described, and
	// whether it is inside a transaction.
	rels map[uint32]*pglogrepl.RelationMessage
	inTx bool

	dead  chan struct{} // closed when the stream ended; err says why
	kick  chan struct{} // asks the keeper to report now
	ready chan struct{} // closed when the first connection is up
}

// sharedView is one schema's store.Stream of a shared slot.
type sharedView struct {
	sh   *sharedStream
	d    *Driver
	nsp  string
	rel  string
	snap xidSnapshot
	dec  *streamDecoder // the reader's

	txs    chan *store.StreamTx
	tokens chan struct{}
	closed chan struct{}
	once   sync.Once

	// Under sh.mu: the persisted position, the ends handed out and not
	// confirmed, and the end of the last transaction handed out.
	confirmed, last uint64
	handed          []uint64
	confirmMu       sync.Mutex
}

// openShared attaches the driver's schema to its slot's shared stream,
// starting the stream when it is the first.
func (d *Driver) openShared(ctx context.Context, o store.StreamOptions) (store.Stream, error) {
	key := d.sharedKey()
	sharedSlots.mu.Lock()
	sh := sharedSlots.m[key]
	sharedSlots.mu.Unlock()
	start, err := d.checkStream(ctx, sh != nil)
	if err != nil {
		return nil, err
	}
	v := &sharedView{d: d, nsp: start.nsp, rel: start.rel, snap: start.snapshot, confirmed: start.confirmed, last: start.confirmed,
		txs: make(chan *store.StreamTx, o.Window), tokens: make(chan struct{}, o.Window), closed: make(chan struct{})}
	for range o.Window {
		v.tokens <- struct{}{}
	}
	sharedSlots.mu.Lock()
	sh = sharedSlots.m[key]
	if sh != nil {
		err := sh.attach(v)
		sharedSlots.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return sh.whenUp(ctx, v)
	}
	sh = &sharedStream{key: key, opts: o, dead: make(chan struct{}), kick: make(chan struct{}, 1), ready: make(chan struct{})}
	v.sh = sh
	sh.pending = []*sharedView{v}
	sharedSlots.m[key] = sh
	sharedSlots.mu.Unlock()
	// The first connection does not wait for a busy slot: another relay
	// streams it, and this one stands by (store.ErrStreamBusy), as a
	// stream of one schema does.
	cur, err := sh.connect(ctx, false)
	if err != nil {
		sh.die(err)
		return nil, err
	}
	close(sh.ready)
	go sh.run(cur)
	go sh.keeper()
	return v, nil
}

// whenUp returns v, attached to sh, once sh's first connection is up:
// until then the slot may be another relay's, and a view returned early
// would report its tenant streaming while it stands by. It returns sh's
// error when that connection fails, and closes v when ctx ends first.
func (sh *sharedStream) whenUp(ctx context.Context, v *sharedView) (store.Stream, error) {
	select {
	case <-sh.ready:
		return v, nil
	case <-sh.dead:
		return nil, sh.failure()
	case <-ctx.Done():
		_ = v.Close(context.WithoutCancel(ctx))
		return nil, ctx.Err()
	}
}

// attach adds v to the views waiting to attach; a second view of one
// schema is refused as a second relay of a slot is.
func (sh *sharedStream) attach(v *sharedView) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.err != nil {
		return sh.err
	}
	for _, o := range append(append([]*sharedView(nil), sh.views...), sh.pending...) {
		if o.nsp == v.nsp && o.rel == v.rel {
			return fmt.Errorf("postgres: open stream: the outbox table %s.%s already streams the shared slot %s in this process: %w", v.nsp, v.rel, v.d.wal.Slot, store.ErrStreamBusy)
		}
	}
	v.sh = sh
	sh.pending = append(sh.pending, v)
	return nil
}

// connect starts a replication connection at the least position of the
// views, every waiting view attached, each with a new decoder. The slot
// may still be held by the walsender of the connection just closed: a
// busy slot is retried for up to the sender timeout when retryBusy (a
// restart), and returned at once otherwise (the first connection).
func (sh *sharedStream) connect(ctx context.Context, retryBusy bool) (*pgStream, error) {
	sh.mu.Lock()
	sh.views = append(sh.views, sh.pending...)
	sh.pending = nil
	if len(sh.views) == 0 {
		sh.mu.Unlock()
		return nil, errors.New("postgres: shared stream: closed")
	}
	d := sh.views[0].d
	start := ^uint64(0)
	for _, v := range sh.views {
		resume := max(v.confirmed, v.last)
		v.dec = newStreamDecoder(v.d.messagePrefix(), v.nsp, v.rel, resume).ownedBy(v.snap)
		start = min(start, resume)
	}
	sh.pos, sh.rels, sh.inTx = start, map[uint32]*pglogrepl.RelationMessage{}, false
	sh.mu.Unlock()
	deadline := time.Now().Add(d.senderTimeout())
	for {
		var flushed *string
		if err := d.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, d.wal.Slot).Scan(&flushed); err != nil {
			return nil, d.translate("open stream: read the slot", err)
		}
		st := &streamStart{confirmed: start}
		if flushed != nil {
			f, err := pglogrepl.ParseLSN(*flushed)
			if err != nil {
				return nil, fmt.Errorf("postgres: open stream: confirmed_flush_lsn %q: %w", *flushed, err)
			}
			st.flushed = uint64(f)
		}
		cur, err := d.startStream(ctx, st, sh.opts, sh)
		if err == nil {
			sh.mu.Lock()
			sh.cur = cur
			sh.mu.Unlock()
			return cur, nil
		}
		if !retryBusy || !errors.Is(err, store.ErrStreamBusy) || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond): // the old walsender exits
		}
	}
}

// run watches the connection: a restart connects again, any other end
// ends the stream for every view.
func (sh *sharedStream) run(cur *pgStream) {
	for {
		<-cur.dead
		err := cur.failure()
		// No connection until the next is up: ServerPID says 0, which
		// the relay's holder check takes as not known yet.
		sh.mu.Lock()
		if sh.cur == cur {
			sh.cur = nil
		}
		sh.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cur.Close(cctx)
		cancel()
		if !errors.Is(err, errRestart) {
			sh.die(err)
			return
		}
		cur.d.logger.Info("postgres: shared stream: a tenant attaches behind the stream's position: starting it again", "slot", cur.d.wal.Slot)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		next, cerr := sh.connect(ctx, true)
		cancel()
		if cerr != nil {
			sh.die(cerr)
			return
		}
		if sh.failure() != nil { // the last view closed meanwhile
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = next.Close(cctx)
			cancel()
			return
		}
		cur = next
	}
}

// die ends the stream for every view with err, once.
func (sh *sharedStream) die(err error) {
	sharedSlots.mu.Lock()
	if sharedSlots.m[sh.key] == sh {
		delete(sharedSlots.m, sh.key)
	}
	sharedSlots.mu.Unlock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.err == nil {
		sh.err = err
		close(sh.dead)
	}
}

func (sh *sharedStream) failure() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.err
}

// admit attaches the waiting views at a boundary, or asks for a restart
// when one is behind the connection's position.
func (sh *sharedStream) admit() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, v := range sh.pending {
		if v.confirmed < sh.pos {
			return errRestart
		}
	}
	for _, v := range sh.pending {
		v.dec = newStreamDecoder(v.d.messagePrefix(), v.nsp, v.rel, v.confirmed).ownedBy(v.snap)
		for _, rm := range sh.rels {
			if _, err := v.dec.handleMsg(0, rm); err != nil {
				return err
			}
		}
		sh.views = append(sh.views, v)
	}
	sh.pending = nil
	return nil
}

// keepalive moves the position to the server's, between transactions.
func (sh *sharedStream) keepalive(walEnd uint64) error {
	if sh.inTx {
		return nil
	}
	if err := sh.admit(); err != nil {
		return err
	}
	sh.mu.Lock()
	sh.pos = max(sh.pos, walEnd)
	sh.mu.Unlock()
	sh.poke()
	return nil
}

// viewTx is a transaction for one view.
type viewTx struct {
	v  *sharedView
	tx *store.StreamTx
}

// dispatch decodes one XLogData payload for every attached view and hands
// each its part of a finished transaction.
func (sh *sharedStream) dispatch(s *pgStream, walStart uint64, data []byte) error {
	msg, err := parseLogical(data)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		sh.rels[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		if err := sh.admit(); err != nil {
			return err
		}
		sh.inTx = true
	}
	sh.mu.Lock()
	views := append([]*sharedView(nil), sh.views...)
	sh.mu.Unlock()
	var out []viewTx
	for _, v := range views {
		res, err := v.dec.handleMsg(walStart, msg)
		if err != nil {
			return err
		}
		if res.tx != nil {
			out = append(out, viewTx{v, res.tx})
		}
	}
	c, ok := msg.(*pglogrepl.CommitMessage)
	if !ok {
		return nil
	}
	sh.inTx = false
	// In flight from here on, before each Next has it: the keeper must
	// not count these views as caught up.
	sh.mu.Lock()
	for _, t := range out {
		t.v.handed = append(t.v.handed, t.tx.End)
		t.v.last = t.tx.End
	}
	sh.pos = max(sh.pos, uint64(c.TransactionEndLSN))
	sh.mu.Unlock()
	for _, t := range out {
		select {
		case t.v.txs <- t.tx:
		case <-t.v.closed: // detached: its state row keeps its position
		case <-s.done:
			return errors.New("postgres: stream: closed")
		}
	}
	sh.poke()
	return nil
}

// poke asks the keeper to report now.
func (sh *sharedStream) poke() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

// candidate is the least position of the views (see sharedStream).
func (sh *sharedStream) candidate() (pos uint64, cur *pgStream, d *Driver, attached map[string]bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	pos, cur, attached = sh.pos, sh.cur, map[string]bool{}
	for _, v := range sh.views {
		p := v.confirmed
		if len(v.handed) == 0 {
			p = max(p, sh.pos)
		}
		pos, d, attached[v.nsp] = min(pos, p), v.d, true
	}
	for _, v := range sh.pending {
		pos, d, attached[v.nsp] = min(pos, v.confirmed), v.d, true
	}
	return pos, cur, d, attached
}

// keeper moves the connection's reported position every status interval
// and when poked, as far as the views and the other schemas allow.
func (sh *sharedStream) keeper() {
	t := time.NewTicker(sh.opts.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-sh.dead:
			return
		case <-t.C:
		case <-sh.kick:
		}
		pos, cur, d, attached := sh.candidate()
		if cur == nil || d == nil {
			continue
		}
		cur.mu.Lock()
		behind := pos > cur.reported
		cur.mu.Unlock()
		if !behind {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		floor, ok, err := d.sharedFloor(ctx, attached)
		cancel()
		if err != nil || !ok {
			continue // the next tick tries again
		}
		cur.mu.Lock()
		cur.reported = max(cur.reported, min(pos, floor))
		cur.mu.Unlock()
		cur.report()
	}
}

// sharedFloor is the least persisted position of the schemas of the
// publication that have no view attached (or waiting) in attached, and
// no more than the server's WAL position before it read them: a schema
// that joins the slot after that read emits only after it. ok is false
// while a table of the publication has no state row for the slot.
func (d *Driver) sharedFloor(ctx context.Context, attached map[string]bool) (floor uint64, ok bool, err error) {
	var at string
	if err := d.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&at); err != nil {
		return 0, false, err
	}
	l, err := pglogrepl.ParseLSN(at)
	if err != nil {
		return 0, false, err
	}
	floor = uint64(l)
	rows, err := d.pool.Query(ctx, `SELECT DISTINCT schemaname::text, to_regclass(format('%I.%I', schemaname, $2::text)) IS NOT NULL
		FROM pg_publication_tables WHERE pubname = $1`, d.wal.Publication, d.prefix+walStateTable)
	if err != nil {
		return 0, false, err
	}
	var union []string
	for rows.Next() {
		var nsp string
		var has bool
		if err := rows.Scan(&nsp, &has); err != nil {
			rows.Close()
			return 0, false, err
		}
		if attached[nsp] {
			continue
		}
		if !has {
			rows.Close()
			return 0, false, nil
		}
		union = append(union, `SELECT (SELECT confirmed_lsn FROM `+pgx.Identifier{nsp, d.prefix + walStateTable}.Sanitize()+` WHERE slot_name = $1) AS l`)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	if len(union) == 0 {
		return floor, true, nil
	}
	// One query for every schema not attached: a row missing holds the
	// slot, as a table without a state table does.
	var missing int
	var least *string
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE l IS NULL), min(l)::text FROM (`+strings.Join(union, " UNION ALL ")+`) s`, d.wal.Slot).Scan(&missing, &least); err != nil {
		return 0, false, err
	}
	if missing > 0 || least == nil {
		return 0, false, nil
	}
	p, err := pglogrepl.ParseLSN(*least)
	if err != nil {
		return 0, false, err
	}
	floor = min(floor, uint64(p))
	return floor, true, nil
}

// Next hands out the view's next transaction, blocking while Window of
// its transactions are unconfirmed.
func (v *sharedView) Next(ctx context.Context) (*store.StreamTx, error) {
	select {
	case <-v.tokens:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-v.sh.dead:
		return nil, v.sh.failure()
	}
	select {
	case tx := <-v.txs:
		return tx, nil
	case <-ctx.Done():
		v.tokens <- struct{}{}
		return nil, ctx.Err()
	case <-v.sh.dead:
		v.tokens <- struct{}{}
		return nil, v.sh.failure()
	}
}

// Confirm persists end in the view's schema (as pgStream.Confirm) and lets
// the keeper move the slot as far as every schema allows.
func (v *sharedView) Confirm(ctx context.Context, end uint64, captured []txbox.ID) error {
	v.confirmMu.Lock()
	defer v.confirmMu.Unlock()
	sh := v.sh
	sh.mu.Lock()
	old := v.confirmed
	sh.mu.Unlock()
	if end <= old {
		return nil
	}
	if err := v.d.persistConfirm(ctx, end, captured); err != nil {
		return err
	}
	sh.mu.Lock()
	v.confirmed = end
	n := 0
	for n < len(v.handed) && v.handed[n] <= end {
		n++
	}
	v.handed = v.handed[n:]
	sh.mu.Unlock()
	for range n {
		select {
		case v.tokens <- struct{}{}:
		default:
		}
	}
	sh.poke()
	return nil
}

// Close detaches the view. A view with nothing unconfirmed persists the
// connection's position as its own first, so that it does not hold the
// slot back where it last confirmed. The last view closes the connection.
func (v *sharedView) Close(ctx context.Context) error {
	v.once.Do(func() {
		close(v.closed)
		sh := v.sh
		sh.mu.Lock()
		// Only an attached view has had every transaction of its schema
		// up to pos handed to it; a view still waiting to attach has not
		// (the connection read past its position without it), and
		// persisting pos for it would skip its schema's events.
		caught := len(v.handed) == 0 && sh.err == nil && slices.Contains(sh.views, v)
		pos := sh.pos
		sh.views = removeView(sh.views, v)
		sh.pending = removeView(sh.pending, v)
		last := len(sh.views)+len(sh.pending) == 0
		cur := sh.cur
		sh.mu.Unlock()
		if caught && pos > v.confirmed {
			_ = v.d.persistConfirm(ctx, pos, nil)
		}
		if last {
			sh.die(errors.New("postgres: stream: closed"))
			if cur != nil {
				_ = cur.Close(ctx)
			}
		}
	})
	return nil
}

func removeView(vs []*sharedView, v *sharedView) []*sharedView {
	out := vs[:0:0]
	for _, o := range vs {
		if o != v {
			out = append(out, o)
		}
	}
	return out
}

// ServerPID is the shared connection's walsender pid.
func (v *sharedView) ServerPID() int {
	v.sh.mu.Lock()
	cur := v.sh.cur
	v.sh.mu.Unlock()
	if cur == nil {
		return 0
	}
	return cur.ServerPID()
}
