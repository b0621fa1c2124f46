package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
)

func runPublish(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "publish", "publish --type TYPE (--payload TEXT | --payload-file FILE|-) [--key K] [--header k=v]... [--not-before TIME|DURATION]")
	var cf configFlags
	cf.register(fs, e)
	typ := fs.String("type", "", "event `type`, such as order-created (required)")
	key := fs.String("key", "", "partition / ordering `key`")
	payload := fs.String("payload", "", "payload `text` (required unless --payload-file; --payload '' publishes an empty payload)")
	payloadFile := fs.String("payload-file", "", "read the payload from `file` ('-' for stdin)")
	var headers multiFlag
	fs.Var(&headers, "header", "add a header `name=value` (repeatable)")
	notBefore := fs.String("not-before", "", "do not deliver before this `time`: RFC 3339 (2026-01-02T15:04:05Z) or a delay from now (90s)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *typ == "" {
		return usagef("--type is required")
	}
	if err := txbox.ValidateEventType(*typ); err != nil {
		return &usageError{err.Error()}
	}
	ev := txbox.Event{Type: *typ, Key: *key}
	// An empty payload must be asked for (--payload ''): a forgotten
	// --payload would otherwise publish an empty event.
	payloadGiven := false
	fs.Visit(func(f *flag.Flag) { payloadGiven = payloadGiven || f.Name == "payload" })
	switch {
	case payloadGiven && *payloadFile != "":
		return usagef("give --payload or --payload-file, not both")
	case !payloadGiven && *payloadFile == "":
		return usagef("give the payload with --payload TEXT or --payload-file FILE ('-' for stdin); for an empty payload say --payload ''")
	case *payloadFile == "-":
		b, err := io.ReadAll(io.LimitReader(e.stdin, txbox.DefaultMaxPayloadSize+1))
		if err != nil {
			return fmt.Errorf("read payload from stdin: %w", err)
		}
		ev.Payload = b
	case *payloadFile != "":
		b, err := os.ReadFile(*payloadFile)
		if err != nil {
			return usagef("read payload: %v", err)
		}
		ev.Payload = b
	default:
		ev.Payload = []byte(*payload)
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return usagef("--header %q must be name=value", h)
		}
		if ev.Headers == nil {
			ev.Headers = map[string]string{}
		}
		ev.Headers[k] = v
	}
	if *notBefore != "" {
		t, err := parseNotBefore(*notBefore, time.Now())
		if err != nil {
			return &usageError{err.Error()}
		}
		ev.NotBefore = t
	}

	cfg, err := cf.load(e)
	if err != nil {
		return err
	}
	if err := cf.requireDatabase(cfg, e.getenv); err != nil {
		return err
	}
	st, err := cfg.OpenStore(ctx, e.getenv, cfg.NewLogger(e.stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	pub, err := outbox.NewPublisher(st, outbox.Config{})
	if err != nil {
		return err
	}
	tx, err := st.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	ids, err := pub.Publish(ctx, tx.Native(), ev)
	if err != nil {
		_ = tx.Rollback(ctx)
		var tooLarge *txbox.PayloadTooLargeError
		if errors.As(err, &tooLarge) {
			return &usageError{err.Error()}
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	out, _ := json.Marshal(map[string]string{"id": ids[0].String(), "type": ev.Type})
	fmt.Fprintln(e.stdout, string(out))
	return nil
}

// parseNotBefore accepts an RFC 3339 time or a non-negative delay from now.
func parseNotBefore(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--not-before %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a delay such as 90s", s)
	}
	return now.Add(d), nil
}
