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
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/outbox"
)

func runPublish(ctx context.Context, e *env, args []string) error {
	var cf configFlags
	ev, err := parsePublish(e, &cf, args)
	if err != nil {
		return err
	}
	st, err := cf.openStore(ctx, e)
	if err != nil {
		return err
	}
	defer st.Close()
	id, err := publishOne(ctx, st, ev)
	if err != nil {
		return err
	}
	out, _ := json.Marshal(map[string]string{"id": id.String(), "type": ev.Type})
	fmt.Fprintln(e.stdout, string(out))
	return nil
}

// parsePublish parses the publish command line (the configuration flags
// into cf) into the event to publish.
func parsePublish(e *env, cf *configFlags, args []string) (txbox.Event, error) {
	fs := newFlagSet(e, "publish", "publish [--tenant NAME] --type TYPE (--payload TEXT | --payload-file FILE|-) [--key K] [--header k=v]... [--not-before TIME|DURATION]")
	cf.register(fs, e)
	cf.registerTenant(fs, false)
	typ := fs.String("type", "", "event `type`, such as order-created (required)")
	key := fs.String("key", "", "partition / ordering `key`")
	payload := fs.String("payload", "", "payload `text` (required unless --payload-file; --payload '' publishes an empty payload)")
	payloadFile := fs.String("payload-file", "", "read the payload from `file` ('-' for stdin)")
	var headers multiFlag
	fs.Var(&headers, "header", "add a header `name=value` (repeatable)")
	notBefore := fs.String("not-before", "", "do not deliver before this `time`: RFC 3339 (2026-01-02T15:04:05Z) or a delay from now (90s)")
	if err := parse(fs, args); err != nil {
		return txbox.Event{}, err
	}
	if *typ == "" {
		return txbox.Event{}, usagef("--type is required")
	}
	if err := txbox.ValidateEventType(*typ); err != nil {
		return txbox.Event{}, &usageError{err.Error()}
	}
	ev := txbox.Event{Type: *typ, Key: *key}
	// An empty payload must be asked for (--payload ''): a forgotten
	// --payload would otherwise publish an empty event.
	payloadGiven := false
	fs.Visit(func(f *flag.Flag) { payloadGiven = payloadGiven || f.Name == "payload" })
	var err error
	if ev.Payload, err = readPayload(e, payloadGiven, *payload, *payloadFile); err != nil {
		return txbox.Event{}, err
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return txbox.Event{}, usagef("--header %q must be name=value", h)
		}
		if ev.Headers == nil {
			ev.Headers = map[string]string{}
		}
		ev.Headers[k] = v
	}
	if *notBefore != "" {
		t, err := parseNotBefore(*notBefore, time.Now())
		if err != nil {
			return txbox.Event{}, &usageError{err.Error()}
		}
		ev.NotBefore = t
	}
	return ev, nil
}

// readPayload returns the payload given with --payload (given: the flag
// was set, possibly to ”) or read from --payload-file ('-': stdin).
func readPayload(e *env, given bool, payload, file string) ([]byte, error) {
	switch {
	case given && file != "":
		return nil, usagef("give --payload or --payload-file, not both")
	case !given && file == "":
		return nil, usagef("give the payload with --payload TEXT or --payload-file FILE ('-' for stdin); for an empty payload say --payload ''")
	case file == "-":
		b, err := io.ReadAll(io.LimitReader(e.stdin, txbox.DefaultMaxPayloadSize+1))
		if err != nil {
			return nil, fmt.Errorf("read payload from stdin: %w", err)
		}
		return b, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("read payload: %v", err)
		}
		return b, nil
	default:
		return []byte(payload), nil
	}
}

// publishOne publishes ev in a transaction of its own.
func publishOne(ctx context.Context, st *config.Store, ev txbox.Event) (txbox.ID, error) {
	pub, err := outbox.NewPublisher(st, outbox.Config{})
	if err != nil {
		return txbox.ID{}, err
	}
	tx, err := st.Begin(ctx)
	if err != nil {
		return txbox.ID{}, fmt.Errorf("begin transaction: %w", err)
	}
	ids, err := pub.Publish(ctx, tx.Native(), ev)
	if err != nil {
		_ = tx.Rollback(ctx)
		var tooLarge *txbox.PayloadTooLargeError
		if errors.As(err, &tooLarge) {
			return txbox.ID{}, &usageError{err.Error()}
		}
		return txbox.ID{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return txbox.ID{}, fmt.Errorf("commit: %w", err)
	}
	return ids[0], nil
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
