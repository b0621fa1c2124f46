package rabbitmq

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// pubChan is one confirm-mode channel and its return listener.
type pubChan struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	// pub serializes publishes: the delivery tags of one channel are a
	// sequence, and interleaving two batches gains nothing.
	pub sync.Mutex

	// closed is closed once the channel is closed; closeErr is set before.
	closed   chan struct{}
	closeErr atomic.Pointer[amqp.Error]

	// Returned messages, correlated by MessageId to the Send waiting for
	// them. pending maps a message id to the return flags of the sends
	// that published it (normally one).
	rmu     sync.Mutex
	pending map[string][]*atomic.Bool

	syncReq      chan chan struct{}
	listenerDone chan struct{}
}

func (s *Sender) dial() (*amqp.Connection, error) {
	cfg := amqp.Config{
		Dial:       amqp.DefaultDial(s.cfg.DialTimeout),
		Heartbeat:  s.cfg.Heartbeat,
		Properties: amqp.NewConnectionProperties(),
	}
	if s.cfg.TLS != nil {
		cfg.TLSClientConfig = s.cfg.TLS.Clone()
	}
	cfg.Properties.SetClientConnectionName(s.cfg.ConnectionName)
	conn, err := amqp.DialConfig(s.cfg.URL, cfg)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// connLocked returns the live connection, dialing when there is none. It
// is called with s.mu held.
func (s *Sender) connLocked() (*amqp.Connection, error) {
	if s.life.Closed() {
		// A Send still in flight during Close must not dial a connection
		// Close would not see.
		return nil, txbox.Transient(fmt.Errorf("rabbitmq sender: %w", txbox.ErrClosed))
	}
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	if s.lastDialErr != nil && time.Since(s.lastDialAt) < s.cfg.ReconnectDelay {
		return nil, sender.Disconnected(txbox.Transient(fmt.Errorf("%w: %v", ErrConnection, s.lastDialErr)))
	}
	s.lastDialAt = time.Now()
	conn, err := s.dial()
	if err != nil {
		s.lastDialErr = err
		return nil, sender.Disconnected(txbox.Transient(fmt.Errorf("%w: dial: %v", ErrConnection, err)))
	}
	s.lastDialErr = nil
	s.learnMaxBody(s.defaultMaxBody(conn))
	s.conn = conn
	s.blocked = watchBlocked(conn)
	s.chans = make([]*pubChan, s.cfg.Channels)
	// Exchanges may have changed while we were away.
	clear(s.exchanges)
	return conn, nil
}

// watchBlocked follows conn's connection.blocked / unblocked notifications.
// The returned pointer holds the broker's reason while it blocks.
func watchBlocked(conn *amqp.Connection) *atomic.Pointer[string] {
	state := new(atomic.Pointer[string])
	ch := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		// The client closes ch when the connection closes.
		for b := range ch {
			if b.Active {
				reason := b.Reason
				state.Store(&reason)
			} else {
				state.Store(nil)
			}
		}
	}()
	return state
}

// connection returns the live connection, dialing if needed.
func (s *Sender) connection() (*amqp.Connection, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connLocked()
}

// channel returns a usable channel, connecting or reopening as needed.
func (s *Sender) channel() (*pubChan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	conn, err := s.connLocked()
	if err != nil {
		return nil, err
	}
	if reason := s.blocked.Load(); reason != nil {
		// A resource alarm (memory or disk) on the broker: it blocks
		// the whole connection, every exchange at once.
		return nil, sender.Disconnected(txbox.Transient(fmt.Errorf("%w: broker blocks publishers: %s", ErrConnection, *reason)))
	}
	i := s.next % len(s.chans)
	s.next++
	pc := s.chans[i]
	if pc != nil && !pc.isClosed() {
		return pc, nil
	}
	pc, err = openPubChan(conn)
	if err != nil {
		return nil, connErr(conn, fmt.Errorf("%w: open channel: %v", ErrConnection, err))
	}
	s.chans[i] = pc
	return pc, nil
}

func openPubChan(conn *amqp.Connection) (*pubChan, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	pc := &pubChan{
		conn:         conn,
		ch:           ch,
		closed:       make(chan struct{}),
		pending:      map[string][]*atomic.Bool{},
		syncReq:      make(chan chan struct{}),
		listenerDone: make(chan struct{}),
	}
	// Unbuffered on purpose: the client's reader goroutine hands a return
	// over before it processes the next frame (the basic.ack of the same
	// message), so once a confirm is seen the return has been received by
	// the listener. See sync.
	returns := ch.NotifyReturn(make(chan amqp.Return))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go pc.listen(returns, closes)
	return pc, nil
}

func (pc *pubChan) listen(returns <-chan amqp.Return, closes <-chan *amqp.Error) {
	defer close(pc.listenerDone)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.rmu.Lock()
			for _, f := range pc.pending[r.MessageId] {
				f.Store(true)
			}
			pc.rmu.Unlock()
		case done := <-pc.syncReq:
			close(done)
		case e, ok := <-closes:
			if ok && e != nil {
				pc.closeErr.Store(e)
			}
			close(pc.closed)
			// Returns are closed with the channel; nothing more can
			// arrive, so the listener can stop. Sends that still want a
			// barrier see listenerDone.
			return
		}
	}
}

// sync returns once every return the client handed over before now has
// been recorded.
func (pc *pubChan) sync() {
	done := make(chan struct{})
	select {
	case pc.syncReq <- done:
		<-done
	case <-pc.listenerDone:
	}
}

func (pc *pubChan) isClosed() bool {
	select {
	case <-pc.closed:
		return true
	default:
		return pc.ch.IsClosed()
	}
}

// closeError waits briefly for the listener to record why the channel
// closed (the client closes confirms and notifies listeners in one
// teardown, in no order we can rely on).
func (pc *pubChan) closeError() *amqp.Error {
	select {
	case <-pc.closed:
	case <-time.After(time.Second):
	}
	return pc.closeErr.Load()
}

// connErr wraps a transient failure, marked [sender.Disconnected] when the
// connection is gone (the channel went with it).
func connErr(conn *amqp.Connection, err error) error {
	if conn == nil || conn.IsClosed() {
		return sender.Disconnected(txbox.Transient(err))
	}
	return txbox.Transient(err)
}
