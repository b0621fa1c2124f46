// Command pgserve runs a throw-away PostgreSQL primary of the version
// matrix (internal/pgcluster) until it is told to stop, for
// scripts/pg-matrix.sh: it prints
//
//	TXBOX_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:<port>/test?sslmode=disable
//
// once the server accepts connections, then waits for SIGINT, SIGTERM or
// the end of its standard input, stops the server and removes its files.
// The server dies with pgserve even when pgserve is killed.
//
//	go build -o /tmp/pgserve ./internal/pgcluster/pgserve && /tmp/pgserve -version 17
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/txbox/txbox/internal/pgcluster"
)

func main() {
	version := flag.Int("version", 17, "PostgreSQL major version: 14, 16, 17 or 18")
	flag.Parse()
	if err := run(pgcluster.Version(*version)); err != nil {
		fmt.Fprintln(os.Stderr, "pgserve:", err)
		os.Exit(1)
	}
}

func run(v pgcluster.Version) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgcluster.StartTimeout)
	n, err := pgcluster.Launch(ctx, v, pgcluster.Options{})
	cancel()
	if err != nil {
		if n != nil {
			_ = n.Close()
		}
		return err
	}
	fmt.Printf("TXBOX_TEST_POSTGRES_URL=%s\n", n.DSN("test"))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	}
	return n.Close()
}
