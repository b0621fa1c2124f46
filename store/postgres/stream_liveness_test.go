package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// silentProxy forwards TCP connections to a server until it is cut: then
// it stops forwarding in both directions and keeps every socket open, as
// a link that goes silent does (no FIN, no RST reaches either side). The
// kernel still acknowledges what the proxy no longer reads, so it shows
// the stream's own read deadline, not TCP_USER_TIMEOUT.
type silentProxy struct {
	ln     net.Listener
	target string
	cut    chan struct{} // closed by Cut
	closed chan struct{} // closed when the test ends
	once   sync.Once
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
	n     int // connections accepted
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln, target: target, cut: make(chan struct{}), closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		close(p.closed)
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// dial is a pgconn DialFunc that connects through the proxy.
func (p *silentProxy) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.ln.Addr().String())
}

// Cut silences every connection, present and future.
func (p *silentProxy) Cut() { p.once.Do(func() { close(p.cut) }) }

func (p *silentProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *silentProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.n++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.forward(up, down)
		go p.forward(down, up)
	}
}

// forward copies src to dst until the cut, then holds both open, reading
// nothing, until the test ends.
func (p *silentProxy) forward(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.cut:
			<-p.closed
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// proxiedDriver is a driver of e's schema and slot whose connections,
// the replication connection included, go through p: the pool's own
// DialFunc, which the stream must keep.
func proxiedDriver(t *testing.T, e *walEnv, p *silentProxy) *postgres.Driver {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.DialFunc = p.dial
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(pool, postgres.Config{Schema: e.schema, Source: postgres.SourceWAL, WAL: e.d.WAL()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestStreamSilentLink: a link to the server that goes silent (no FIN, no
// RST) fails the stream's Next within half the sender timeout and says
// why, before the server frees the slot for another relay at the full
// sender timeout; once it has, another stream takes the slot over.
// Before the read deadline Next blocked on such a link until TCP gave up.
func TestStreamSilentLink(t *testing.T) {
	t.Parallel()
	const senderTimeout = 2 * time.Second
	e := openWAL(t, senderTimeout)
	ctx := ctxT(t)
	p := newSilentProxy(t, testenv.PostgresAddr)
	d := proxiedDriver(t, e, p)
	before := p.accepted()
	s, err := d.OpenStream(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if p.accepted() == before {
		t.Fatal("the replication connection did not go through the pool's DialFunc")
	}
	if pid := slotPID(t, e); s.ServerPID() != pid {
		t.Errorf("ServerPID %d, the slot's active_pid %d", s.ServerPID(), pid)
	}
	ev := newEmitted("silent.before", "")
	e.emit(t, e.pool, ev, true, e.prefix())
	got := next(t, s)
	wantTx(t, got, []bool{false}, ev)
	if err := s.Confirm(ctx, got.End, nil); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	cut := time.Now()
	nctx, cancel := context.WithTimeout(ctx, 4*senderTimeout)
	defer cancel()
	_, err = s.Next(nctx)
	took := time.Since(cut)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next still blocked %s after the link went silent", took.Round(time.Millisecond))
	}
	want := "no message from the server for 1.5s: the connection is lost or the server stopped answering"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Next on a silent link: %v, want %q", err, want)
	}
	t.Logf("Next failed %s after the cut: %v", took.Round(time.Millisecond), err)
	// Half the sender timeout, and before the server frees the slot.
	if took >= senderTimeout {
		t.Errorf("Next failed %s after the cut, not within the sender timeout %s", took.Round(time.Millisecond), senderTimeout)
	}
	// The stream stays dead.
	if _, err := s.Next(ctx); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Next again: %v", err)
	}

	// The server frees the slot at its wal_sender_timeout, and a stream
	// over a working link takes it over.
	testenv.WaitFor(t, 4*senderTimeout, "the server to free the silent stream's slot", func() bool { return slotPID(t, e) == 0 })
	s2 := e.open(t, nil)
	after := newEmitted("silent.after", "")
	e.emit(t, e.pool, after, true, e.prefix())
	wantTx(t, next(t, s2), []bool{false}, after)
	if pid := slotPID(t, e); s2.ServerPID() != pid {
		t.Errorf("the new stream's ServerPID %d, the slot's active_pid %d", s2.ServerPID(), pid)
	}
}

// stillHealthy checks that Next neither delivers nor fails for d: it
// returns the context's deadline.
func stillHealthy(t *testing.T, s store.Stream, d time.Duration, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tx, err := s.Next(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: Next returned %v, %v within %s, want it to wait", what, tx, err, d)
	}
}

// TestStreamQuietButHealthy: with a short sender timeout (a read deadline
// of 3s), a healthy stream survives two sender timeouts with nothing to
// read (the idle walsender answers the stream's requests for a reply),
// and a backpressure stall of one and a half (Next not called, the reader blocked on
// handing over a transaction) followed by reading what the socket holds;
// the walsender stays the same and an event emitted after still arrives.
func TestStreamQuietButHealthy(t *testing.T) {
	t.Parallel()
	// 4s (a read deadline of 3s): 2s tripped once under make chaos on a
	// loaded machine, the idle walsender answering late.
	const senderTimeout = 4 * time.Second
	e := openWAL(t, senderTimeout)
	ctx := ctxT(t)
	s := e.open(t, &store.StreamOptions{Window: 1})
	pid := s.ServerPID()
	if got := slotPID(t, e); got != pid {
		t.Fatalf("ServerPID %d, the slot's active_pid %d", pid, got)
	}

	stillHealthy(t, s, 2*senderTimeout, "idle")

	evs := []emitted{newEmitted("quiet.a", ""), newEmitted("quiet.b", ""), newEmitted("quiet.c", "")}
	for _, ev := range evs {
		e.emit(t, e.pool, ev, true, e.prefix())
	}
	first := next(t, s)
	wantTx(t, first, []bool{false}, evs[0])
	// Window 1 and nothing confirmed: the reader holds the second
	// transaction and waits for Next to take it.
	stillHealthy(t, s, senderTimeout+senderTimeout/2, "stalled")
	if err := s.Confirm(ctx, first.End, nil); err != nil {
		t.Fatal(err)
	}
	second := next(t, s)
	wantTx(t, second, []bool{false}, evs[1])
	if err := s.Confirm(ctx, second.End, nil); err != nil {
		t.Fatal(err)
	}
	third := next(t, s)
	wantTx(t, third, []bool{false}, evs[2])
	if err := s.Confirm(ctx, third.End, nil); err != nil {
		t.Fatal(err)
	}
	stillHealthy(t, s, senderTimeout, "idle after the stall")

	last := newEmitted("quiet.last", "")
	e.emit(t, e.pool, last, true, e.prefix())
	wantTx(t, next(t, s), []bool{false}, last)
	if got := slotPID(t, e); got != pid || s.ServerPID() != pid {
		t.Errorf("walsender %d (ServerPID %d), was %d", got, s.ServerPID(), pid)
	}
}

// TestStreamLargeFilteredTransaction: while the walsender decodes a large
// transaction whose changes the publication filters out it sends nothing,
// and reads (and answers) the stream's status updates only every half
// sender timeout; the read timeout allows for that, and the event
// committed after it arrives on the same stream. With a read timeout of
// half the sender timeout the stream failed 12s into the decode (twice
// out of two, 3M rows, sender timeout 2s), and would again on every
// reconnect. It runs with a sender timeout of 6s (the walsender answers
// every 3s while decoding, the deadline is 4.5s): with 2s the half-second
// margin was too thin for a loaded machine. It writes some 300MB of WAL:
// make chaos.
func TestStreamLargeFilteredTransaction(t *testing.T) {
	// Not parallel: its 3M-row insert holds a transaction id for as long
	// as it runs (a minute on a loaded machine), and every slot the
	// package's parallel tests create waits for it (TestWALEmitGuard's
	// creations timed out beside it in make chaos). Sequential tests run
	// before the parallel ones are released.
	if !testenv.Chaos(t, "writes 300MB of WAL and decodes it for about 30s") {
		return
	}
	e := openWAL(t, 6*time.Second)
	ctx := ctxT(t)
	s := e.open(t, nil)
	pid := s.ServerPID()
	big := pgx.Identifier{e.schema, "big"}.Sanitize()
	if _, err := e.pool.Exec(ctx, `CREATE TABLE `+big+` (a int, b text)`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+big+` SELECT g, repeat('x', 50) FROM generate_series(1, 3000000) g`); err != nil {
		t.Fatal(err)
	}
	ev := newEmitted("after.big", "")
	e.emit(t, e.pool, ev, true, e.prefix())
	start := time.Now()
	nctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	tx, err := s.Next(nctx)
	if err != nil {
		t.Fatalf("Next after the large transaction: %v", err)
	}
	t.Logf("the event after the large transaction arrived after %s", time.Since(start).Round(time.Millisecond))
	wantTx(t, tx, []bool{false}, ev)
	if s.ServerPID() != pid || slotPID(t, e) != pid {
		t.Errorf("walsender %d, was %d", slotPID(t, e), pid)
	}
}
