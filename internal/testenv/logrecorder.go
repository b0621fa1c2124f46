package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// LogRecord is one record a LogRecorder kept: its attributes are
// flattened to strings, groups joined with dots.
type LogRecord struct {
	Time    time.Time
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// LogRecorder is a slog.Handler that keeps every record, for a test that
// checks what was logged and when. It is safe for concurrent use; the
// loggers derived with With share its records.
type LogRecorder struct {
	shared *logRecords
	attrs  []slog.Attr
	group  string
}

type logRecords struct {
	mu  sync.Mutex
	all []LogRecord
}

// NewLogRecorder returns an empty recorder.
func NewLogRecorder() *LogRecorder { return &LogRecorder{shared: &logRecords{}} }

// Logger returns a logger that records at every level.
func (r *LogRecorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled records every level.
func (r *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps rec.
func (r *LogRecorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	for _, a := range r.attrs {
		flatten(attrs, "", a)
	}
	rec.Attrs(func(a slog.Attr) bool {
		flatten(attrs, r.group, a)
		return true
	})
	r.shared.mu.Lock()
	defer r.shared.mu.Unlock()
	r.shared.all = append(r.shared.all, LogRecord{Time: rec.Time, Level: rec.Level, Message: rec.Message, Attrs: attrs})
	return nil
}

// WithAttrs returns a recorder that adds attrs to its records.
func (r *LogRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *r
	c.attrs = append(append([]slog.Attr(nil), r.attrs...), qualify(r.group, attrs)...)
	return &c
}

// WithGroup returns a recorder that puts the records' attributes in
// group name.
func (r *LogRecorder) WithGroup(name string) slog.Handler {
	c := *r
	c.group = join(r.group, name)
	return &c
}

// Records returns the records whose message starts with prefix ("" for
// all), oldest first.
func (r *LogRecorder) Records(prefix string) []LogRecord {
	r.shared.mu.Lock()
	defer r.shared.mu.Unlock()
	var out []LogRecord
	for _, rec := range r.shared.all {
		if strings.HasPrefix(rec.Message, prefix) {
			out = append(out, rec)
		}
	}
	return out
}

// String returns every record, one a line, for a failing test's output.
func (r *LogRecorder) String() string {
	var b strings.Builder
	for _, rec := range r.Records("") {
		fmt.Fprintf(&b, "%s %s %q %v\n", rec.Time.Format("15:04:05.000"), rec.Level, rec.Message, rec.Attrs)
	}
	return b.String()
}

func qualify(group string, attrs []slog.Attr) []slog.Attr {
	if group == "" {
		return attrs
	}
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = slog.Attr{Key: join(group, a.Key), Value: a.Value}
	}
	return out
}

func flatten(into map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			flatten(into, join(prefix, a.Key), g)
		}
		return
	}
	into[join(prefix, a.Key)] = v.String()
}

func join(prefix, key string) string {
	switch {
	case prefix == "":
		return key
	case key == "":
		return prefix
	}
	return prefix + "." + key
}
