package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// Defaults of store.StreamOptions.
const (
	// DefaultStreamStatusInterval is how often the stream reports its
	// position to the server.
	DefaultStreamStatusInterval = time.Second
	// DefaultStreamWindow is how many transactions Next hands out before
	// Confirm must catch up.
	DefaultStreamWindow = 1024
)

var _ store.Streamer = (*Driver)(nil)

// OpenStream starts streaming the slot from the LSN the last Confirm
// persisted (0/0 before the first: the slot's own start), over a
// replication connection whose application_name and wal_sender_timeout
// come from WALConfig. Before it connects it refuses: wal_level other than
// logical, a missing slot, an invalidated slot (matching
// store.ErrStreamLost), a synchronous_standby_names that would choose the
// relay as a synchronous standby, and a slot that another walsender
// streams (matching store.ErrStreamBusy, as does the server's "slot is
// active" when two relays race).
//
// The stream uses pgoutput's protocol version 1 with messages and binary
// tuples; never streaming or two_phase, so each transaction arrives whole,
// after its commit, in commit order. An event's Pos is its transaction's
// commit LSN shifted left by 16 bits, or'ed with its index in the
// transaction. A transaction is held in memory whole: Window bounds how
// many, not how large each is.
func (d *Driver) OpenStream(ctx context.Context, opts *store.StreamOptions) (store.Stream, error) {
	var o store.StreamOptions
	if opts != nil {
		o = *opts
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = DefaultStreamStatusInterval
	}
	if o.Window <= 0 {
		o.Window = DefaultStreamWindow
	}
	if d.wal.Shared {
		st, err := d.openShared(ctx, o)
		return st, d.seen(err)
	}
	start, err := d.checkStream(ctx, false)
	if err != nil {
		return nil, d.seen(err)
	}
	st, err := d.startStream(ctx, start, o, nil)
	if err != nil {
		return nil, d.seen(err)
	}
	return st, nil
}

// startStream connects and starts streaming at start.confirmed. With fan
// set, the stream is a shared slot's connection (stream_shared.go): fan
// decodes it for its tenants, and start names no outbox table.
func (d *Driver) startStream(ctx context.Context, start *streamStart, o store.StreamOptions, fan *sharedStream) (*pgStream, error) {
	params := map[string]string{"application_name": d.wal.ApplicationName}
	if d.wal.SenderTimeout > 0 {
		params["wal_sender_timeout"] = strconv.FormatInt(d.wal.SenderTimeout.Milliseconds(), 10)
	}
	cfg := d.replicationConfig(params)
	cfg.DialFunc = liveDial(cfg.DialFunc, d.senderTimeout())
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open stream: replication connection: %w", lostErr(err))
	}
	err = pglogrepl.StartReplication(ctx, conn, d.wal.Slot, pglogrepl.LSN(start.confirmed), pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			"publication_names " + quoteLiteral(d.wal.Publication),
			"messages 'true'",
			"binary 'true'",
		},
	})
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55006" {
			return nil, fmt.Errorf("postgres: open stream: %w: %w", store.ErrStreamBusy, err)
		}
		return nil, fmt.Errorf("postgres: open stream: start replication: %w", lostErr(streamError(err)))
	}
	timeout := d.senderTimeout()
	s := &pgStream{
		d:           d,
		conn:        conn,
		fan:         fan,
		interval:    o.StatusInterval,
		readTimeout: streamReadTimeout(timeout),
		askEvery:    streamAskEvery(o.StatusInterval, timeout),
		txs:         make(chan *store.StreamTx),
		tokens:      make(chan struct{}, o.Window),
		dead:        make(chan struct{}),
		done:        make(chan struct{}),
		poke:        make(chan struct{}, 1),
		readDone:    make(chan struct{}),
		statDone:    make(chan struct{}),
	}
	// The server streams from the slot's confirmed_flush_lsn when that is
	// past the start asked for; reporting less would move it back.
	s.confirmed, s.reported = start.confirmed, max(start.confirmed, start.flushed)
	if fan == nil {
		s.dec = newStreamDecoder(d.messagePrefix(), start.nsp, start.rel, start.confirmed).ownedBy(start.snapshot)
	}
	for range o.Window {
		s.tokens <- struct{}{}
	}
	go s.read()
	go s.status()
	return s, nil
}

// streamError maps the server's error on an invalidated slot to
// store.ErrStreamLost.
func streamError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55000" &&
		(strings.Contains(pe.Message, "invalidated") || strings.Contains(pe.Detail, "invalidated")) {
		return fmt.Errorf("%w: %w; %s", store.ErrStreamLost, err, recreateHint)
	}
	return err
}

// pgStream is one open stream. Three goroutines share it: the reader
// (read), the status sender (status) and the callers of Next and Confirm.
//
// Flow control: Next takes a token from tokens (Window of them) for each
// transaction it hands out, and Confirm gives back one per transaction it
// confirms; while none is left Next blocks, and the reader, blocked on
// handing its next transaction over, stops reading the socket, which
// holds the server back. The status sender runs on its own timer
// meanwhile, so the server keeps hearing from the stream and
// wal_sender_timeout does not trip.
//
// Liveness: a link that goes silent (no FIN, no RST) must not leave the
// stream streaming while the server frees the slot for another relay at
// wal_sender_timeout. The reader fails the stream after readTimeout
// without a byte from the server while it waits for one; a wait starts
// when the reader asks for the next message, so the time it spends
// blocked handing a transaction to Next (backpressure) never counts. An
// idle walsender writes nothing while it hears from the stream, so every
// status update sent while the reader waits asks the server for a reply,
// which it sends at once (a keepalive); the status sender runs every
// askEvery for that. The connection's TCP keepalive and TCP_USER_TIMEOUT
// (liveDial) fail it at the kernel's level too, status writes included.
type pgStream struct {
	d    *Driver
	conn *pgconn.PgConn
	dec  *streamDecoder // the reader's own; nil with fan
	// fan is the shared slot this connection streams for its tenants,
	// nil for a stream of one driver.
	fan      *sharedStream
	interval time.Duration
	// readTimeout is how long the reader waits for a byte from the
	// server before the stream fails (streamReadTimeout).
	readTimeout time.Duration
	// askEvery is the status sender's period while the reader waits:
	// the interval, or a tenth of the sender timeout when shorter.
	askEvery time.Duration
	// waiting is set while the reader waits for the server.
	waiting atomic.Bool

	txs      chan *store.StreamTx
	tokens   chan struct{}
	dead     chan struct{} // closed when the stream failed; err says why
	done     chan struct{} // closed by Close
	poke     chan struct{} // asks the status sender to report now
	readDone chan struct{}
	statDone chan struct{}

	mu sync.Mutex
	// err is why the stream died.
	err error
	// confirmed is the persisted position: the end of the newest
	// confirmed transaction (or the start).
	confirmed uint64
	// reported is what the status sender reports as written, flushed and
	// applied: confirmed, or further when a keepalive or an event-less
	// transaction came while nothing was in flight.
	reported uint64
	// handed holds the ends of the transactions decoded (handed out, or
	// being handed to Next) and not yet confirmed, oldest first.
	handed []uint64

	confirmMu sync.Mutex
	closeOnce sync.Once
	writeMu   sync.Mutex
}

// fail records the first error and marks the stream dead. A lost
// replication connection resets the driver's pool at once: its
// connections went to the same server.
func (s *pgStream) fail(err error) {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
		close(s.dead)
	}
	s.mu.Unlock()
	if first {
		s.d.seen(err)
	}
}

// failure is why the stream died.
func (s *pgStream) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Next hands out the next transaction with events, blocking while Window
// transactions are unconfirmed.
func (s *pgStream) Next(ctx context.Context) (*store.StreamTx, error) {
	select {
	case <-s.tokens:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.dead:
		return nil, s.failure()
	}
	select {
	case tx := <-s.txs:
		return tx, nil
	case <-ctx.Done():
		s.tokens <- struct{}{}
		return nil, ctx.Err()
	case <-s.dead:
		s.tokens <- struct{}{}
		return nil, s.failure()
	}
}

// Confirm deletes the acked captured rows and persists end in one durable
// transaction, then reports end to the server as the flush position. A
// Confirm at or before the persisted position does nothing.
func (s *pgStream) Confirm(ctx context.Context, end uint64, captured []txbox.ID) error {
	s.confirmMu.Lock()
	defer s.confirmMu.Unlock()
	s.mu.Lock()
	old := s.confirmed
	s.mu.Unlock()
	if end <= old {
		return nil
	}
	if err := s.d.persistConfirm(ctx, end, captured); err != nil {
		return err
	}
	s.mu.Lock()
	s.confirmed = end
	s.reported = max(s.reported, end)
	n := 0
	for n < len(s.handed) && s.handed[n] <= end {
		n++
	}
	s.handed = s.handed[n:]
	s.mu.Unlock()
	for range n {
		select {
		case s.tokens <- struct{}{}:
		default: // never more than Window: a confirm of what Next did not hand out
		}
	}
	s.report()
	return nil
}

// persistConfirm deletes the acked captured rows and persists end as the
// confirmed position of the driver's state row, in one durable
// transaction (pgStream.Confirm, sharedView.Confirm).
func (d *Driver) persistConfirm(ctx context.Context, end uint64, captured []txbox.ID) error {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return d.translate("stream confirm", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The persisted position is what a restart resumes from: it must be
	// durable before the server hears of it, whatever the session's
	// synchronous_commit.
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
		return d.translate("stream confirm", err)
	}
	if len(captured) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM `+d.table(d.tables.Outbox)+` WHERE id = ANY($1) AND stream_pos IS NULL`, pgUUIDs(captured)); err != nil {
			return d.translate("stream confirm: delete captured rows", err)
		}
	}
	// GREATEST: a relay that lost the slot while paused and confirms late
	// never moves the position back below the one its successor persisted.
	tag, err := tx.Exec(ctx, `UPDATE `+d.walStateTable()+` SET confirmed_lsn = GREATEST(confirmed_lsn, $2::text::pg_lsn), confirmed_at = now() WHERE slot_name = $1`,
		d.wal.Slot, pglogrepl.LSN(end).String())
	if err != nil {
		return d.translate("stream confirm: persist the position", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("postgres: stream confirm: %s has no row for the slot %s: %w; %s", d.walStateTable(), d.wal.Slot, store.ErrStreamLost, recreateHint)
	}
	if err := tx.Commit(ctx); err != nil {
		return d.translate("stream confirm", err)
	}
	return nil
}

// report asks the status sender to send the position now.
func (s *pgStream) report() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// Close sends a last status update and closes the connection.
func (s *pgStream) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.done)
		<-s.statDone // it sends the last status before it returns
		s.writeMu.Lock()
		_, _ = s.conn.Conn().Write([]byte{'X', 0, 0, 0, 4}) // Terminate
		s.writeMu.Unlock()
		_ = s.conn.Conn().Close()
		<-s.readDone
		// Nothing else uses the connection now. A failed read has
		// already begun closing pgconn's side in the background (then
		// Close does nothing); otherwise Close does it. Either way wait
		// for it, so that nothing outlives the stream.
		_ = s.conn.Close(ctx)
		select {
		case <-s.conn.CleanupDone():
		case <-ctx.Done():
		}
	})
	return nil
}

// read is the reader goroutine: it receives the stream, decodes it and
// hands finished transactions to Next. Only it receives on the
// connection, with a background context, so that pgconn never sets a
// deadline on the socket the status sender writes to; the reader's own
// deadline (receive) is on the read side only.
func (s *pgStream) read() {
	defer close(s.readDone)
	for {
		msg, err := s.receive()
		if errors.Is(err, errSilent) {
			s.fail(fmt.Errorf("postgres: stream: no message from the server for %s: the connection is lost or the server stopped answering: %w", s.readTimeout, store.ErrConnectionLost))
			// pgconn keeps a connection whose read timed out; this
			// one is dead. Closing it stops the status sender too.
			_ = s.conn.Conn().Close()
			return
		}
		if err != nil {
			select {
			case <-s.done:
				s.fail(errors.New("postgres: stream: closed"))
			default:
				s.fail(fmt.Errorf("postgres: stream: receive: %w", lostErr(err)))
			}
			return
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.copyData(m.Data); err != nil {
				s.fail(err)
				return
			}
		case *pgproto3.ErrorResponse:
			s.fail(fmt.Errorf("postgres: stream: %w", lostErr(streamError(pgconn.ErrorResponseToPgError(m)))))
			return
		case *pgproto3.CopyDone:
			s.fail(errors.New("postgres: stream: the server ended the stream"))
			return
		}
		select {
		case <-s.done:
			s.fail(errors.New("postgres: stream: closed"))
			return
		default:
		}
	}
}

// errSilent is receive's error when the server sent nothing for
// readTimeout.
var errSilent = errors.New("silent")

// receive waits for the next message with a read deadline readTimeout
// from now: from when the reader starts waiting, not from the last
// message, so that a reader that was blocked on Next for longer reads
// what the socket holds. A message that takes longer than readTimeout to
// arrive whole (a large one on a slow link) is waited for as long as its
// bytes keep coming.
func (s *pgStream) receive() (pgproto3.BackendMessage, error) {
	buffered := s.conn.Frontend().ReadBufferLen()
	for {
		if err := s.conn.Conn().SetReadDeadline(time.Now().Add(s.readTimeout)); err != nil {
			return nil, err
		}
		s.waiting.Store(true)
		msg, err := s.conn.ReceiveMessage(context.Background())
		s.waiting.Store(false)
		if err == nil || !pgconn.Timeout(err) {
			return msg, err
		}
		// pgconn keeps the part of a message read before a timeout, and
		// the next receive goes on from there.
		if n := s.conn.Frontend().ReadBufferLen(); n != buffered {
			buffered = n
			continue
		}
		return nil, errSilent
	}
}

// streamReadTimeout is the reader's read timeout for a sender timeout:
// three quarters of it. Less than the sender timeout by more than the
// status sender's period (a tenth of it at most), so that on a silent link
// the stream fails before the server, which last heard from it at most a
// period before the link went silent, frees the slot. More than half of
// it by more than that period: a walsender busy decoding a large
// transaction that sends nothing (its changes are all filtered out) reads
// the stream's status updates, and answers, only once half the sender
// timeout has passed since it last read one (WalSndUpdateProgress), and
// half would trip on that.
func streamReadTimeout(senderTimeout time.Duration) time.Duration {
	return senderTimeout * 3 / 4
}

// streamAskEvery is the status sender's period while the reader waits:
// the status interval, or a tenth of the sender timeout when that is
// shorter (and a millisecond at least, for a timer).
func streamAskEvery(interval, senderTimeout time.Duration) time.Duration {
	return max(min(interval, senderTimeout/10), time.Millisecond)
}

// copyData handles one CopyData message of the stream.
func (s *pgStream) copyData(data []byte) error {
	if len(data) == 0 {
		return errors.New("postgres: stream: an empty CopyData message")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("postgres: stream: keepalive: %w", err)
		}
		if s.fan != nil {
			if err := s.fan.keepalive(uint64(ka.ServerWALEnd)); err != nil {
				return err
			}
		} else {
			s.passed(uint64(ka.ServerWALEnd))
		}
		if ka.ReplyRequested {
			s.report()
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("postgres: stream: %w", err)
		}
		// The receive buffer is reused by the next read, and events
		// keep slices of the message (payloads).
		wal := xld.WALData
		if len(wal) > 0 && (wal[0] == 'M' || wal[0] == 'I') {
			wal = append([]byte(nil), wal...)
		}
		if s.fan != nil {
			return s.fan.dispatch(s, uint64(xld.WALStart), wal)
		}
		res, err := s.dec.handle(uint64(xld.WALStart), wal)
		if err != nil {
			return err
		}
		if res.passed != 0 {
			s.passed(res.passed)
		}
		if res.tx != nil {
			// In flight from here on, before Next has it: a keepalive
			// read meanwhile must not report past it.
			s.mu.Lock()
			s.handed = append(s.handed, res.tx.End)
			s.mu.Unlock()
			select {
			case s.txs <- res.tx:
			case <-s.done:
				return errors.New("postgres: stream: closed")
			}
		}
	}
	return nil
}

// passed moves the reported position to lsn when nothing is in flight:
// every transaction handed out is confirmed and the reader is not inside
// one. A restart does not resume there (it is not persisted) but the
// server starts at the slot's confirmed_flush_lsn, the greater of the two.
func (s *pgStream) passed(lsn uint64) {
	if s.dec.partial() {
		return
	}
	s.mu.Lock()
	if len(s.handed) == 0 && lsn > s.reported {
		s.reported = lsn
	}
	s.mu.Unlock()
}

// status is the status sender: it reports the position every interval
// and when asked, independently of reading, and once more at Close. While
// the reader waits for the server, each update asks for a reply (see
// pgStream), and the timer runs every askEvery when that is shorter than
// interval (a short sender timeout).
func (s *pgStream) status() {
	defer close(s.statDone)
	t := time.NewTicker(s.askEvery)
	defer t.Stop()
	var last time.Time
	for {
		ticked := false
		select {
		case <-s.done:
			_ = s.sendStatus(false)
			return
		case <-s.dead:
			return
		case <-t.C:
			ticked = true
		case <-s.poke:
		}
		now := time.Now()
		ask := s.waiting.Load()
		// A tick of askEvery reports only to ask for a reply or when
		// interval has passed; a tick of interval always reports.
		if ticked && !ask && now.Sub(last) < s.interval-s.askEvery/2 {
			continue
		}
		if err := s.sendStatus(ask); err != nil {
			s.fail(fmt.Errorf("postgres: stream: send status: %w", err))
			_ = s.conn.Conn().Close() // wakes the reader
			return
		}
		last = now
	}
}

// sendStatus writes a standby status update with the reported position
// as written, flushed and applied, asking the server for an immediate
// reply when replyRequested. It encodes the message itself: the client
// library's helper would copy the write position into a zero flush
// position, and the flush position here is only ever what was confirmed.
func (s *pgStream) sendStatus(replyRequested bool) error {
	s.mu.Lock()
	pos := s.reported
	s.mu.Unlock()
	buf := make([]byte, 0, 1+4+34)
	buf = append(buf, 'd')
	buf = binary.BigEndian.AppendUint32(buf, 4+34)
	buf = append(buf, pglogrepl.StandbyStatusUpdateByteID)
	buf = binary.BigEndian.AppendUint64(buf, pos) // written
	buf = binary.BigEndian.AppendUint64(buf, pos) // flushed
	buf = binary.BigEndian.AppendUint64(buf, pos) // applied
	buf = binary.BigEndian.AppendUint64(buf, uint64(time.Now().UnixMicro()-pgEpochMicros))
	// The walsender answers a requested reply with a keepalive at once
	// (ProcessStandbyReplyMessage).
	if replyRequested {
		buf = append(buf, 1)
	} else {
		buf = append(buf, 0)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.conn.Conn().SetWriteDeadline(time.Now().Add(max(s.interval, 5*time.Second))); err != nil {
		return err
	}
	_, err := s.conn.Conn().Write(buf)
	return err
}

// ServerPID is the walsender's backend pid (see store.Stream).
func (s *pgStream) ServerPID() int { return int(s.conn.PID()) }

// senderTimeout is WALConfig.SenderTimeout, or DefaultSenderTimeout when
// unset (New fills it in; this keeps the stream's timeouts positive
// whatever built the Driver).
func (d *Driver) senderTimeout() time.Duration {
	if d.wal.SenderTimeout > 0 {
		return d.wal.SenderTimeout
	}
	return DefaultSenderTimeout
}

// StreamSenderTimeout is the wal_sender_timeout the relay's replication
// connections ask for (WALConfig.SenderTimeout); 0 when the server's own
// setting applies.
func (d *Driver) StreamSenderTimeout() time.Duration { return d.wal.SenderTimeout }
