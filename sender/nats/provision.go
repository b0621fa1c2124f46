package nats

import (
	"context"
	"encoding/json"
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
	pl, err := s.plan(ctx, routes)
	if err != nil {
		return err
	}
	switch {
	case len(pl.mine) == 0 || (pl.existing != nil && len(pl.add) == 0):
		return nil
	case pl.existing == nil:
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: pl.mine, Storage: jetstream.FileStorage})
		if err != nil {
			return fmt.Errorf("nats: provision: create stream %q with subjects %q: %w", s.stream, pl.mine, err)
		}
		s.log.Info("nats provision: stream created", "stream", s.stream, "subjects", pl.mine)
		return nil
	}
	cfg := *pl.existing
	cfg.Subjects = pl.subjects
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("nats: provision: add subjects %q to stream %q: %w", pl.add, s.stream, err)
	}
	s.log.Info("nats provision: stream updated", "stream", s.stream, "subjects", pl.subjects)
	return nil
}

// provisionPlan is what Provision would do, found changing nothing.
type provisionPlan struct {
	// want are the subjects of the routes, as streams bind them; mine
	// those the provision stream must bind (other streams bind the rest
	// already).
	want, mine []string
	// existing is the provision stream's configuration, nil when it does
	// not exist (Provision creates it with mine).
	existing *jetstream.StreamConfig
	// subjects are existing's subjects with mine added, and add those of
	// mine it lacks (none: nothing to update).
	subjects, add []string
}

// plan works out, reading only, what Provision must create or change for
// routes, and fails as Provision would when a subject partly overlaps
// another stream's.
func (s *Sender) plan(ctx context.Context, routes []sender.Route) (provisionPlan, error) {
	var pl provisionPlan
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
		return pl, fmt.Errorf("nats: provision: no route gives a subject a stream can bind (subject templates other than a trailing .{event_type}: %q)", skipped)
	}
	if len(skipped) > 0 {
		s.log.Warn("nats provision skips subject templates it cannot bind; list the event types, or give the subjects", "templates", skipped)
	}
	want = cover(want)
	pl.want = want
	if err := s.waitConnected(ctx); err != nil {
		return pl, fmt.Errorf("nats: provision stream %q: %w", s.stream, err)
	}

	// Subjects another stream already binds as a whole stay with it; a
	// partial overlap cannot be resolved here.
	for _, subj := range want {
		name, err := s.js.StreamNameBySubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			pl.mine = append(pl.mine, subj)
			continue
		case err != nil:
			return pl, fmt.Errorf("nats: provision: look up the stream of subject %q: %w", subj, err)
		case name == s.stream:
			pl.mine = append(pl.mine, subj)
			continue
		}
		other, err := s.js.Stream(ctx, name)
		if err != nil {
			return pl, fmt.Errorf("nats: provision: read stream %q: %w", name, err)
		}
		if !slices.ContainsFunc(other.CachedInfo().Config.Subjects, func(o string) bool { return covers(o, subj) }) {
			return pl, fmt.Errorf("nats: provision: subject %q overlaps the subjects %q of stream %q; bind it in that stream, or give subjects that do not overlap", subj, other.CachedInfo().Config.Subjects, name)
		}
		s.log.Info("nats provision: subject already bound by another stream", "subject", subj, "stream", name)
	}
	if len(pl.mine) == 0 {
		return pl, nil
	}
	st, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return pl, nil
	}
	if err != nil {
		return pl, fmt.Errorf("nats: provision: read stream %q: %w", s.stream, err)
	}
	cfg := st.CachedInfo().Config
	pl.existing = &cfg
	pl.subjects = cover(append(slices.Clone(cfg.Subjects), pl.mine...))
	if !sameSet(pl.subjects, cfg.Subjects) {
		for _, subj := range pl.subjects {
			if !slices.Contains(cfg.Subjects, subj) {
				pl.add = append(pl.add, subj)
			}
		}
	}
	return pl, nil
}

// CheckProvision implements [sender.ProvisionChecker]: it works out,
// changing nothing, what Provision would do for routes at the relay's
// start, and checks that it could. It fails as Provision would when a
// subject partly overlaps another stream's subjects, when the account
// has no JetStream or is at its limit of streams, or when the server
// refuses the credentials the stream API request Provision would send
// (a create or update request for the provision stream, sent with a
// mismatched stream name so that the server answers without creating
// anything). What it cannot tell before trying is listed in the plan's
// Unverified.
func (s *Sender) CheckProvision(ctx context.Context, routes []sender.Route) (sender.ProvisionPlan, error) {
	var out sender.ProvisionPlan
	pl, err := s.plan(ctx, routes)
	if err != nil {
		return out, err
	}
	bound := slices.Clone(pl.want)
	out.Covers = func(r sender.Route) bool {
		return slices.ContainsFunc(bound, func(subj string) bool { return covers(subj, r.Subject) })
	}
	if len(pl.mine) == 0 {
		out.Actions = append(out.Actions, "nothing to do: other streams bind every subject")
		return out, nil
	}
	if pl.existing != nil && len(pl.add) == 0 {
		out.Actions = append(out.Actions, fmt.Sprintf("nothing to do: stream %q binds the subjects", s.stream))
		return out, nil
	}
	out.Verified = append(out.Verified, "no other stream binds or overlaps the subjects")
	api := "CREATE"
	if pl.existing == nil {
		out.Actions = append(out.Actions, fmt.Sprintf("create stream %q with subjects %q (file storage, the server's defaults)", s.stream, pl.mine))
		ai, err := s.js.AccountInfo(ctx)
		if err != nil {
			return out, fmt.Errorf("nats: provision: JetStream account info: %w", err)
		}
		if max := ai.Limits.MaxStreams; max > 0 && ai.Streams >= max {
			return out, fmt.Errorf("nats: provision: the account has %d streams, its limit: stream %q cannot be created", ai.Streams, s.stream)
		}
		out.Verified = append(out.Verified, fmt.Sprintf("the account's JetStream has room for a stream (%d streams, limit: %s)", ai.Streams, limit(ai.Limits.MaxStreams)))
		if ai.Limits.MaxStore == 0 {
			out.Unverified = append(out.Unverified, "the account's file storage limit is 0 (the server's JetStream limits apply)")
		}
	} else {
		api = "UPDATE"
		out.Actions = append(out.Actions, fmt.Sprintf("add subjects %q to stream %q", pl.add, s.stream))
	}
	if err := s.probeStreamAPI(ctx, api); err != nil {
		return out, err
	}
	out.Verified = append(out.Verified, fmt.Sprintf("the credentials may send the stream %s request (the server answered it)", strings.ToLower(api)))
	out.Unverified = append(out.Unverified, "the server's storage at start (disk space, the account's byte limits)")
	return out, nil
}

// probeStreamAPI sends the stream create or update request of the
// provision stream with a body naming another stream: the server checks
// the credentials' publish permission on the subject first, then answers
// "stream name in subject does not match request" without touching any
// stream. A permission violation gets no answer at all (the server
// drops the request), hence the short bound.
func (s *Sender) probeStreamAPI(ctx context.Context, api string) error {
	subject := "$JS.API.STREAM." + api + "." + s.stream
	body, _ := json.Marshal(map[string]string{"name": s.stream + "_TXBOX_CHECK"})
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	msg, err := s.nc.RequestWithContext(pctx, subject, body)
	if err != nil {
		return fmt.Errorf("nats: provision: no answer to the stream %s request on %s (%w): the credentials may not allow it (a permission violation gets no answer)", strings.ToLower(api), subject, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil || resp.Error == nil {
		return fmt.Errorf("nats: provision: unexpected answer to the stream %s check on %s", strings.ToLower(api), subject)
	}
	if resp.Error.ErrCode != jsStreamMismatch {
		return fmt.Errorf("nats: provision: the server refuses the stream %s request: %s (error %d)", strings.ToLower(api), resp.Error.Description, resp.Error.ErrCode)
	}
	return nil
}

const (
	// probeTimeout bounds probeStreamAPI's request.
	probeTimeout = 3 * time.Second
	// jsStreamMismatch is JetStream's error code for a stream API request
	// whose body names another stream than its subject.
	jsStreamMismatch = 10056
)

// limit prints a JetStream limit, -1 or 0 meaning none.
func limit(n int) string {
	if n <= 0 {
		return "no limit"
	}
	return fmt.Sprint(n)
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
