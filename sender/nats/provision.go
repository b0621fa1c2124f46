package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/sender"
)

// Provision implements [sender.Provisioner]: it makes sure a JetStream
// stream binds every subject of routes, so that no message is rejected
// for want of a stream. A subject another stream already binds is left to
// it. The others are bound by the stream named Config.ProvisionStream
// ("TXBOX" by default): created with the server's defaults (file storage,
// limits retention, no size limits, a 2-minute duplicate window) when it
// does not exist, or extended with the subjects it lacks; nothing else of
// an existing stream is changed, and no subject is removed.
//
// A route subject ending in the "{event_type}" placeholder after a dot,
// such as "events.{event_type}", is bound as the wildcard "events.>",
// which covers every event type (types may contain dots). Other templates
// cannot be bound and are skipped. Provision waits, within ctx, for the
// connection to be established.
func (s *Sender) Provision(ctx context.Context, routes []sender.Route) error {
	var want []string
	var skipped []string
	for _, r := range routes {
		if r.Subject == "" {
			continue
		}
		subj, ok := bindable(r.Subject)
		if !ok {
			skipped = append(skipped, r.Subject)
			continue
		}
		want = append(want, subj)
	}
	if len(want) == 0 {
		return fmt.Errorf("nats: provision: no route gives a subject a stream can bind (subject templates other than a trailing .{event_type}: %q)", skipped)
	}
	if len(skipped) > 0 {
		s.log.Warn("nats provision skips subject templates it cannot bind; list the event types, or give the subjects", "templates", skipped)
	}
	want = cover(want)
	if err := s.waitConnected(ctx); err != nil {
		return fmt.Errorf("nats: provision stream %q: %w", s.stream, err)
	}

	// Subjects another stream already binds as a whole stay with it; a
	// partial overlap cannot be resolved here.
	var mine []string
	for _, subj := range want {
		name, err := s.js.StreamNameBySubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			mine = append(mine, subj)
			continue
		case err != nil:
			return fmt.Errorf("nats: provision: look up the stream of subject %q: %w", subj, err)
		case name == s.stream:
			mine = append(mine, subj)
			continue
		}
		other, err := s.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("nats: provision: read stream %q: %w", name, err)
		}
		if !slices.ContainsFunc(other.CachedInfo().Config.Subjects, func(o string) bool { return covers(o, subj) }) {
			return fmt.Errorf("nats: provision: subject %q overlaps the subjects %q of stream %q; bind it in that stream, or give subjects that do not overlap", subj, other.CachedInfo().Config.Subjects, name)
		}
		s.log.Info("nats provision: subject already bound by another stream", "subject", subj, "stream", name)
	}
	if len(mine) == 0 {
		return nil
	}

	st, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: mine, Storage: jetstream.FileStorage})
		if err != nil {
			return fmt.Errorf("nats: provision: create stream %q with subjects %q: %w", s.stream, mine, err)
		}
		s.log.Info("nats provision: stream created", "stream", s.stream, "subjects", mine)
		return nil
	}
	if err != nil {
		return fmt.Errorf("nats: provision: read stream %q: %w", s.stream, err)
	}
	cfg := st.CachedInfo().Config
	subjects := cover(append(slices.Clone(cfg.Subjects), mine...))
	if sameSet(subjects, cfg.Subjects) {
		return nil
	}
	cfg.Subjects = subjects
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("nats: provision: add subjects %q to stream %q: %w", mine, s.stream, err)
	}
	s.log.Info("nats provision: stream updated", "stream", s.stream, "subjects", subjects)
	return nil
}

// waitConnected returns once the connection is up, or the not-connected
// error (with the last dial error) when ctx ends first.
func (s *Sender) waitConnected(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !s.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", s.notConnected(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// bindable turns a route subject into one a stream can bind: itself when
// it holds no placeholder, "prefix.>" for "prefix.{event_type}".
func bindable(subject string) (string, bool) {
	const ph = sender.PlaceholderEventType
	n := strings.Count(subject, ph)
	switch {
	case n == 0:
		return subject, true
	case n == 1 && strings.HasSuffix(subject, "."+ph) && len(subject) > len(ph)+1:
		return strings.TrimSuffix(subject, ph) + ">", true
	}
	return "", false
}

// covers reports whether every subject that b matches is matched by a
// (NATS wildcards: "*" one token, ">" one or more trailing tokens).
func covers(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i, tok := range at {
		if tok == ">" {
			return len(bt) > i
		}
		if i >= len(bt) {
			return false
		}
		switch {
		case tok == "*":
			if bt[i] == ">" {
				return false
			}
		case tok != bt[i]:
			return false
		}
	}
	return len(at) == len(bt)
}

// cover returns subjects sorted, without duplicates and without a subject
// another one covers.
func cover(subjects []string) []string {
	s := slices.Clone(subjects)
	slices.Sort(s)
	s = slices.Compact(s)
	out := s[:0:0]
	for i, a := range s {
		if !slices.ContainsFunc(s, func(b string) bool { return b != a && covers(b, a) }) {
			out = append(out, s[i])
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// CheckConnection implements [sender.ConnectionChecker]: the connection is
// up, so the server accepted the credentials (an authorization violation
// keeps it down), and JetStream answers an account-info request.
func (s *Sender) CheckConnection(ctx context.Context) error {
	if err := s.waitConnected(ctx); err != nil {
		return err
	}
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats: JetStream account info: %w", err)
	}
	return nil
}

// CheckRoute implements [sender.Checker]: a stream binds r's subject.
func (s *Sender) CheckRoute(ctx context.Context, r sender.Route) error {
	if err := s.waitConnected(ctx); err != nil {
		return err
	}
	_, err := s.js.StreamNameBySubject(ctx, r.Subject)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("nats: no stream binds subject %q: %w", r.Subject, sender.ErrNoDestination)
	case err != nil:
		return fmt.Errorf("nats: look up the stream of subject %q: %w", r.Subject, err)
	}
	return nil
}
