package postgres

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/internal/testenv"
)

var (
	fuzzConnOnce sync.Once
	fuzzConn     *pgx.Conn
	fuzzErr      error
)

// FuzzArrayLiterals checks that the PostgreSQL array text literals the
// database/sql insert path builds parse back, on the real server, to
// exactly the strings and bytes that went in: quotes, backslashes, braces,
// commas, NULL-looking text, unicode, arbitrary bytes. The seed corpus runs
// in every `go test`; `go test -fuzz FuzzArrayLiterals ./store/postgres`
// explores further.
func FuzzArrayLiterals(f *testing.F) {
	for _, s := range []string{"", "NULL", `x"; DROP TABLE t;--`, "a\\b", "{,}", " lead", "trail ", "ünï名", "`", "'"} {
		f.Add(s, []byte(s))
	}
	f.Add("\t\n", []byte{0, 0xff, '\\', '"'})
	f.Fuzz(func(t *testing.T, s string, b []byte) {
		if !validUTF8NoNUL(s) {
			t.Skip() // PostgreSQL text cannot hold NUL or invalid UTF-8
		}
		fuzzConnOnce.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			fuzzConn, fuzzErr = pgx.Connect(ctx, testenv.PostgresURL)
		})
		if fuzzErr != nil {
			t.Fatalf("connect: %v", fuzzErr)
		}
		ctx := context.Background()
		var texts []string
		if err := fuzzConn.QueryRow(ctx, `SELECT $1::text::text[]`, textArrayText([]string{s, "x", s})).Scan(&texts); err != nil {
			t.Fatalf("text array literal of %q: %v", s, err)
		}
		if len(texts) != 3 || texts[0] != s || texts[1] != "x" || texts[2] != s {
			t.Fatalf("text array round trip of %q = %q", s, texts)
		}
		var blobs [][]byte
		if err := fuzzConn.QueryRow(ctx, `SELECT $1::text::bytea[]`, byteaArrayText([][]byte{b, {}, b})).Scan(&blobs); err != nil {
			t.Fatalf("bytea array literal of %x: %v", b, err)
		}
		if len(blobs) != 3 || !bytes.Equal(blobs[0], b) || len(blobs[1]) != 0 || !bytes.Equal(blobs[2], b) {
			t.Fatalf("bytea array round trip of %x = %x", b, blobs)
		}
	})
}

func validUTF8NoNUL(s string) bool {
	for _, r := range s {
		if r == 0 || r == '\uFFFD' {
			return false
		}
	}
	return true
}
