package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/internal/testenv"
)

// TestPGProxyCounts runs a real pgx connection through the counting
// proxy to the local PostgreSQL: N simple statements, a batch of 3, and
// an explicit transaction, each checked against the counts (and the
// statements by text) and against the values the server sends back
// through the proxy.
func TestPGProxyCounts(t *testing.T) {
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	up, err := pgUpstream(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := startPGProxy(up)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	dsn, err := proxiedDSN(testenv.PostgresURL, p.addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The counts follow the bytes to the server, so they may land just
	// after the client has its answer: wait for the exact figures.
	expect := func(what string, want pgCounts) {
		t.Helper()
		testenv.WaitFor(t, 5*time.Second, what, func() bool { return p.counts() == want })
	}
	expect("the connection, no message yet", pgCounts{Conns: 1})

	const n = 7
	for range n {
		tag, err := conn.Exec(ctx, "SELECT 1")
		if err != nil || tag.String() != "SELECT 1" {
			t.Fatalf("Exec through the proxy: %q, %v", tag, err)
		}
	}
	// pgx sends a statement without arguments as one simple query.
	expect("N simple queries", pgCounts{Conns: 1, Queries: n, Implicit: n})

	b := &pgx.Batch{}
	got := make([]int, 3)
	for i := range got {
		b.Queue("SELECT $1::int * 10", i+1).QueryRow(func(r pgx.Row) error { return r.Scan(&got[i]) })
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if got[0] != 10 || got[1] != 20 || got[2] != 30 {
		t.Errorf("batch read back %v through the proxy, want [10 20 30]", got)
	}
	// One statement not yet prepared: pgx prepares it (Parse, Describe,
	// Sync), then pipelines the 3 Bind/Execute pairs with one Sync.
	expect("a batch of 3", pgCounts{Conns: 1, Queries: n, Parses: 1, Executes: 3, Syncs: 2, Implicit: n + 3})

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := pgCounts{Conns: 1, Queries: n + 3, Parses: 1, Executes: 3, Syncs: 2, Begins: 1, Commits: 1, Implicit: n + 3}
	expect("an explicit transaction", want)
	texts := p.statementTexts()
	for text, want := range map[string]int64{"SELECT 1": n + 1, "SELECT $1::int * 10": 3, "begin": 1, "commit": 1} {
		if texts[text] != want {
			t.Errorf("statement %q counted %d times, want %d (all: %v)", text, texts[text], want, texts)
		}
	}
	// The BEGIN … COMMIT is 3 statements and one transaction.
	if want.statements() != n+6 || want.roundTrips() != n+5 || want.transactions() != n+4 {
		t.Errorf("statements %d, round trips %d, transactions %d", want.statements(), want.roundTrips(), want.transactions())
	}
}

// TestParseFrontendSSLRequest: an SSLRequest before the startup (the
// server answers 'N') is skipped and the typed messages after the real
// startup are counted; a CancelRequest is recognised as such.
func TestParseFrontendSSLRequest(t *testing.T) {
	var s bytes.Buffer
	untyped := func(code uint32, body string) {
		_ = binary.Write(&s, binary.BigEndian, uint32(8+len(body)))
		_ = binary.Write(&s, binary.BigEndian, code)
		s.WriteString(body)
	}
	typed := func(typ byte, body string) {
		s.WriteByte(typ)
		_ = binary.Write(&s, binary.BigEndian, uint32(4+len(body)))
		s.WriteString(body)
	}
	untyped(pgSSLRequest, "")
	untyped(3<<16, "user\x00postgres\x00\x00")
	typed('Q', "begin\x00")
	typed('P', "s1\x00SELECT $1\x00\x00\x00")
	typed('B', "\x00s1\x00\x00\x00\x00\x00\x00\x00")
	typed('E', "\x00\x00\x00\x00\x00")
	typed('S', "")
	typed('Q', "  COMMIT;\x00")
	typed('X', "")
	var c pgConnCounts
	if err := parseFrontend(bufio.NewReader(&s), &c); err == nil || c.cancel.Load() {
		t.Fatalf("parse: err %v (want the end of the stream), cancel %v", err, c.cancel.Load())
	}
	if got, want := c.load(), (pgCounts{Conns: 1, Queries: 2, Parses: 1, Executes: 1, Syncs: 1, Begins: 1, Commits: 1}); got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}

	s.Reset()
	untyped(pgCancelRequest, "\x00\x00\x00\x01\x00\x00\x00\x02")
	var cc pgConnCounts
	if err := parseFrontend(bufio.NewReader(&s), &cc); err != nil || !cc.cancel.Load() {
		t.Errorf("cancel request: err %v, cancel %v", err, cc.cancel.Load())
	}
}
