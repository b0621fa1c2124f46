package bench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgCounts are the frontend (client → server) PostgreSQL protocol
// messages a pgProxy saw. The idle scenario counts the relay's own work
// with them: pg_stat_database's counter of the relay's database also
// counts the transactions PostgreSQL runs in a LISTENing backend to read
// past other databases' notifications, which no client asked for.
type pgCounts struct {
	Conns     int64 // connections accepted (a CancelRequest is one)
	Queries   int64 // 'Q': simple-protocol queries, each a round trip
	Parses    int64 // 'P'
	Executes  int64 // 'E': statements of the extended protocol
	Syncs     int64 // 'S': the round trips of the extended protocol
	Begins    int64 // BEGIN / START TRANSACTION in a 'Q' or 'P'
	Commits   int64 // COMMIT / END
	Rollbacks int64 // ROLLBACK / ABORT
	// Implicit counts the statements run outside BEGIN … COMMIT: each
	// is at most one transaction of its own.
	Implicit int64
	Unparsed int64 // connections whose stream could not be parsed (forwarded all the same)
}

// statements is what the relay asked the server to run: each is at
// most one transaction, so it is an upper bound of the relay's
// transactions (an explicit BEGIN … COMMIT is several statements).
func (c pgCounts) statements() int64 { return c.Queries + c.Executes }

// roundTrips counts the waits for the server: a simple query, or a Sync
// closing a pipeline of extended-protocol messages.
func (c pgCounts) roundTrips() int64 { return c.Queries + c.Syncs }

// transactions bounds the relay's transactions from above: one per
// explicit BEGIN, one per statement outside them (statements pipelined
// before one Sync share one). A Parse/Describe/Sync round trip that
// prepares a statement without running it is a server transaction too,
// and is not in it: read it with Parses, which stop once pgx has cached
// the relay's statements.
func (c pgCounts) transactions() int64 { return c.Begins + c.Implicit }

func (c pgCounts) sub(o pgCounts) pgCounts {
	return pgCounts{Conns: c.Conns - o.Conns, Queries: c.Queries - o.Queries, Parses: c.Parses - o.Parses,
		Executes: c.Executes - o.Executes, Syncs: c.Syncs - o.Syncs, Begins: c.Begins - o.Begins,
		Commits: c.Commits - o.Commits, Rollbacks: c.Rollbacks - o.Rollbacks, Implicit: c.Implicit - o.Implicit, Unparsed: c.Unparsed - o.Unparsed}
}

// pgConnCounts is one proxied connection's counts.
type pgConnCounts struct {
	opened                    time.Time
	closed                    atomic.Int64 // unix nanoseconds, 0 while open
	queries, parses, executes atomic.Int64
	syncs, begins, commits    atomic.Int64
	rollbacks, implicit       atomic.Int64
	unparsed, cancel          atomic.Bool

	// inTx is true between a BEGIN and its COMMIT or ROLLBACK; only the
	// parsing goroutine uses it.
	inTx bool
	// tally, when set, counts each statement run (a 'Q', or an 'E' of
	// the statement its portal was bound to) by its text.
	tally func(text string)
}

func (c *pgConnCounts) load() pgCounts {
	n := pgCounts{Conns: 1, Queries: c.queries.Load(), Parses: c.parses.Load(), Executes: c.executes.Load(),
		Syncs: c.syncs.Load(), Begins: c.begins.Load(), Commits: c.commits.Load(), Rollbacks: c.rollbacks.Load(),
		Implicit: c.implicit.Load()}
	if c.unparsed.Load() {
		n.Unparsed = 1
	}
	return n
}

// pgProxy is a TCP proxy in front of PostgreSQL that forwards bytes both
// ways unchanged and counts the frontend messages of each connection. The
// client must not use TLS (sslmode=disable), or the stream cannot be read.
type pgProxy struct {
	ln       net.Listener
	upstream string
	started  time.Time

	mu    sync.Mutex
	conns []*pgConnCounts
	texts map[string]int64 // statements run, by text (pgStatementKey)
	open  map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startPGProxy listens on 127.0.0.1 (a random port) and forwards every
// connection to upstream (host:port).
func startPGProxy(upstream string) (*pgProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pgProxy{ln: ln, upstream: upstream, started: time.Now(), open: map[net.Conn]struct{}{}, texts: map[string]int64{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *pgProxy) addr() string { return p.ln.Addr().String() }

// openConns counts the client connections open now.
func (p *pgProxy) openConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open) / 2
}

// counts sums every connection's counts so far.
func (p *pgProxy) counts() pgCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t pgCounts
	for _, c := range p.conns {
		n := c.load()
		t.Conns++
		t.Queries += n.Queries
		t.Parses += n.Parses
		t.Executes += n.Executes
		t.Syncs += n.Syncs
		t.Begins += n.Begins
		t.Commits += n.Commits
		t.Rollbacks += n.Rollbacks
		t.Implicit += n.Implicit
		t.Unparsed += n.Unparsed
	}
	return t
}

func (p *pgProxy) tally(text string) {
	k := pgStatementKey(text)
	p.mu.Lock()
	p.texts[k]++
	p.mu.Unlock()
}

// statementTexts copies the count of statements run by text so far.
func (p *pgProxy) statementTexts() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int64, len(p.texts))
	for k, v := range p.texts {
		out[k] = v
	}
	return out
}

// pgStatementKey is a statement's text with its white space collapsed,
// cut to 100 characters: enough to tell the relay's jobs apart.
func pgStatementKey(text string) string {
	k := strings.Join(strings.Fields(text), " ")
	if len(k) > 100 {
		k = k[:100] + "…"
	}
	if k == "" {
		k = "(empty)"
	}
	return k
}

// connLines describes each connection (at most max), for the report.
func (p *pgProxy) connLines(max int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for i, c := range p.conns {
		if i == max {
			out = append(out, fmt.Sprintf("… and %d more connections", len(p.conns)-max))
			break
		}
		n := c.load()
		life := "open to the end"
		if ns := c.closed.Load(); ns != 0 {
			life = fmt.Sprintf("closed at +%s", time.Unix(0, ns).Sub(p.started).Round(time.Second))
		}
		kind := ""
		if c.cancel.Load() {
			kind = " (cancel request)"
		}
		out = append(out, fmt.Sprintf("connection %d%s: opened at +%s, %s; %d simple queries, %d parses, %d executes, %d syncs, %d BEGIN",
			i+1, kind, c.opened.Sub(p.started).Round(time.Second), life, n.Queries, n.Parses, n.Executes, n.Syncs, n.Begins))
	}
	return out
}

// close stops accepting, closes the connections in flight and waits for
// their goroutines.
func (p *pgProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.open {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *pgProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
		if err != nil {
			// The client sees its connection refused as a closed stream.
			_ = client.Close()
			continue
		}
		c := &pgConnCounts{opened: time.Now(), tally: p.tally}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.open[client], p.open[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(client, server, c)
	}
}

// serve forwards both ways until either side ends. The client → server
// bytes are parsed as they are forwarded (a tee), so parsing adds no
// delay and a stream the parser does not understand is still forwarded.
func (p *pgProxy) serve(client, server net.Conn, c *pgConnCounts) {
	defer p.wg.Done()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(client, server)
		done <- struct{}{}
	}()
	go func() {
		br := bufio.NewReader(io.TeeReader(client, server))
		if err := parseFrontend(br, c); err != nil && !errors.Is(err, io.EOF) {
			c.unparsed.Store(true)
		}
		// Keep forwarding whatever the parser did not read.
		_, _ = io.Copy(io.Discard, br)
		done <- struct{}{}
	}()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
	c.closed.Store(time.Now().UnixNano())
	p.mu.Lock()
	delete(p.open, client)
	delete(p.open, server)
	p.mu.Unlock()
}

// The request codes an untyped first message may carry instead of a
// protocol version (PostgreSQL's protocol, "Message Formats").
const (
	pgCancelRequest = 80877102
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
)

// pgMaxText bounds the query text read to look for BEGIN/COMMIT; longer
// messages are skipped unread.
const pgMaxText = 1 << 20

// parseFrontend reads one connection's frontend stream: the untyped
// startup (readStartup), then typed messages (1-byte type, int32 length including
// itself, body). It returns at the end of the stream or at a message it
// cannot frame.
func parseFrontend(r *bufio.Reader, c *pgConnCounts) error {
	if cancel, err := readStartup(r); err != nil || cancel {
		c.cancel.Store(cancel)
		return err
	}
	var hdr [5]byte
	prepared := map[string]string{} // statement name → text
	bound := ""                     // the text of the statement of the last Bind
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		typ, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
		if n < 4 || n > 1<<30 {
			return fmt.Errorf("message %q of %d bytes", typ, n)
		}
		body := int(n) - 4
		switch typ {
		case 'Q':
			c.queries.Add(1)
		case 'P':
			c.parses.Add(1)
		case 'E':
			c.executes.Add(1)
			c.statement(bound)
		case 'S':
			c.syncs.Add(1)
		}
		if (typ == 'Q' || typ == 'P' || typ == 'B') && body <= pgMaxText {
			b := make([]byte, body)
			if _, err := io.ReadFull(r, b); err != nil {
				return err
			}
			// Each starts with NUL-terminated strings: Q the query; P the
			// statement name, then the query; B the portal, then the
			// statement name.
			f := strings.SplitN(string(b), "\x00", 3)
			switch {
			case typ == 'Q':
				c.statement(f[0])
			case typ == 'P' && len(f) > 1:
				prepared[f[0]] = f[1]
			case typ == 'B' && len(f) > 1:
				bound = prepared[f[1]]
			}
			continue
		}
		if _, err := r.Discard(body); err != nil {
			return err
		}
	}
}

// readStartup reads the untyped messages that open a connection (int32
// length including itself, int32 code) up to the real startup message,
// or a CancelRequest, which ends the connection.
func readStartup(r *bufio.Reader) (cancel bool, err error) {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return false, err
		}
		n, code := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		if n < 8 || n > 10_000 {
			return false, fmt.Errorf("startup message of %d bytes", n)
		}
		if _, err := r.Discard(int(n) - 8); err != nil {
			return false, err
		}
		switch code {
		case pgSSLRequest, pgGSSENCRequest:
			// The server answers one byte; after an 'N' the client goes
			// on with its startup in plain. (After an 'S' or 'G' the rest
			// is encrypted: the framing check then fails and the
			// connection counts as unparsed.)
		case pgCancelRequest:
			return true, nil
		default:
			return false, nil
		}
	}
}

// statement counts one statement run (a simple query, or an execute of
// the statement bound last) by its text: BEGIN and COMMIT, and whether
// it ran outside an explicit transaction. Only the first statement of a
// text is looked at.
func (c *pgConnCounts) statement(text string) {
	if c.tally != nil {
		c.tally(text)
	}
	f := strings.Fields(strings.ToUpper(strings.TrimLeft(text, " \t\r\n(")))
	verb := ""
	if len(f) > 0 {
		verb = strings.TrimRight(f[0], ";")
	}
	switch {
	case verb == "BEGIN" || (verb == "START" && len(f) > 1 && strings.HasPrefix(f[1], "TRANSACTION")):
		c.begins.Add(1)
		c.inTx = true
	case verb == "COMMIT" || verb == "END" || verb == "ROLLBACK" || verb == "ABORT":
		if verb == "COMMIT" || verb == "END" {
			c.commits.Add(1)
		} else {
			c.rollbacks.Add(1)
		}
		if !c.inTx {
			c.implicit.Add(1) // a stray COMMIT is a statement of its own
		}
		c.inTx = false
	case !c.inTx:
		c.implicit.Add(1)
	}
}

// pgUpstream is the host:port of the PostgreSQL server dsn names; the
// proxy speaks TCP only.
func pgUpstream(dsn string) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", usagef("--dsn: %v", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "", fmt.Errorf("--dsn names a Unix socket (%s); the idle scenario's counting proxy needs a TCP address", cfg.Host)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// proxiedDSN is dsn (a URL) pointing at the proxy's address instead,
// without TLS so that the proxy can read the stream.
func proxiedDSN(dsn, addr string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("--dsn must be a postgres:// URL for the idle scenario: %q", dsn)
	}
	u.Host = addr
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String(), nil
}
