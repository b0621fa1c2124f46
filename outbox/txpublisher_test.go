package outbox_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
)

func newTxPublisher[TTx any](t *testing.T, s store.TxOutbox[TTx]) *outbox.TxPublisher[TTx] {
	t.Helper()
	p, err := outbox.NewTxPublisher(s, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A publisher typed for pgx.Tx writes in the transaction and only if it
// commits, like the untyped one; a nil pgx.Tx is still refused.
func TestTxPublisherPgx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newTxPublisher(t, b.store.Pgx())

	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := p.Publish(b.ctx, tx, txbox.Event{Type: "typed-pgx", Payload: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	one, err := p.PublishJSON(b.ctx, tx, "typed-pgx", "k", map[string]int{"n": 2})
	if err != nil {
		t.Fatal(err)
	}
	res, err := outbox.PublishResultTx(b.ctx, p, tx, "typed-pgx", "k", func(context.Context) (int, error) { return 3, nil })
	if err != nil || res != 3 {
		t.Fatalf("PublishResultTx = %d, %v", res, err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if rows := b.claim(t, "typed-pgx"); len(rows) != 3 || rows[0].ID != ids[0] || rows[1].ID != one {
		t.Fatalf("claimed %d rows, want the 3 published", len(rows))
	}

	tx, err = b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(b.ctx, tx, txbox.Event{Type: "typed-rolled-back"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if rows := b.claim(t, "typed-rolled-back"); len(rows) != 0 {
		t.Fatal("a rolled-back event was claimable")
	}

	var none pgx.Tx
	if _, err := p.Publish(b.ctx, none, txbox.Event{Type: "typed-pgx"}); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Fatalf("nil pgx.Tx: %v, want txbox.ErrNoTransaction", err)
	}
	if _, err := outbox.PublishResultTx(b.ctx, p, none, "typed-pgx", "", func(context.Context) (int, error) {
		t.Fatal("fn ran without a transaction")
		return 0, nil
	}); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Fatalf("PublishResultTx with a nil pgx.Tx: %v", err)
	}
	if p.Publisher() == nil {
		t.Fatal("Publisher() is nil")
	}
}

// *sql.Tx goes through both the SQL and the ORM publishers (the ORM
// interface is database/sql's method set), committed or rolled back.
func TestTxPublisherSQLAndORM(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sqlPub := newTxPublisher(t, b.store.SQL())
	ormPub := newTxPublisher(t, b.store.ORM())

	tx, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := sqlPub.Publish(b.ctx, tx, txbox.Event{Type: "typed-sql", Payload: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	o, err := ormPub.PublishJSON(b.ctx, tx, "typed-sql", "", "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if rows := b.claim(t, "typed-sql"); len(rows) != 2 || rows[0].ID != a[0] || rows[1].ID != o {
		t.Fatalf("claimed %d rows, want the 2 published", len(rows))
	}

	tx, err = b.db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ormPub.Publish(b.ctx, tx, txbox.Event{Type: "typed-sql-rolled-back"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if rows := b.claim(t, "typed-sql-rolled-back"); len(rows) != 0 {
		t.Fatal("a rolled-back event was claimable")
	}
	if _, err := outbox.NewTxPublisher[pgx.Tx](nil, outbox.Config{}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("nil store: %v, want txbox.ErrInvalidConfig", err)
	}
}

// misuseLine matches a compiler error in testdata/misuse/misuse.go.
var misuseLine = regexp.MustCompile(`misuse\.go:(\d+):\d+: (.*)`)

// The typed publishers turn handing them the wrong value into a compile
// error: testdata/misuse holds correct calls and one wrong call per line
// marked MISUSE, and the compiler must refuse exactly the marked lines.
func TestTxPublisherMisuseDoesNotCompile(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "build", "-gcflags=-e", "-o", os.DevNull, "./testdata/misuse").CombinedOutput()
	if err == nil {
		t.Fatal("testdata/misuse compiled: a typed publisher accepted a value it cannot use")
	}
	refused := map[int]string{}
	for _, m := range misuseLine.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(m[1])
		refused[n] = m[2]
	}
	f, err := os.Open("testdata/misuse/misuse.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	marked := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		isMisuse := strings.Contains(line, "// MISUSE")
		switch msg, ok := refused[n]; {
		case isMisuse && !ok:
			t.Errorf("line %d compiled: %s", n, strings.TrimSpace(line))
		case isMisuse:
			marked++
			if !strings.Contains(msg, "cannot use") && !strings.Contains(msg, "does not match") {
				t.Errorf("line %d refused for another reason: %s", n, msg)
			}
		case ok:
			t.Errorf("line %d is a correct call but was refused: %s", n, msg)
		}
	}
	if marked < 7 {
		t.Fatalf("%d misuses refused, want the 7 of testdata/misuse:\n%s", marked, out)
	}
}
