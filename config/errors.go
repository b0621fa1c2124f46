package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/txbox/txbox"
)

// ErrInvalid matches every error Load returns for a configuration that is
// malformed or has a bad value, and so does txbox.ErrInvalidConfig, the
// sentinel of every configuration error of txbox. Compare with errors.Is;
// use errors.As with Errors to get each problem and its key path.
var ErrInvalid = errors.New("config: invalid configuration")

// Error is one problem in a configuration, at a key path such as
// "events.order-created.polling.max-delay".
type Error struct {
	// Source is where the bad value came from: the file name, or the
	// environment variable or flag that overrode the key.
	Source string
	// Line is the line in Source, when Source is a file; 0 otherwise.
	Line int
	// Path is the key path, dot-separated; a map key containing a dot is
	// bracketed: events["order.created"].batch-size.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as "source:line: path: message".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes every *Error match ErrInvalid and txbox.ErrInvalidConfig.
func (e *Error) Is(target error) bool { return isInvalid(target) }

func isInvalid(target error) bool { return target == ErrInvalid || target == txbox.ErrInvalidConfig }

// Errors is every problem Load found, in file order. It matches
// ErrInvalid.
type Errors []*Error

// Error lists every problem, one per line.
func (es Errors) Error() string {
	if len(es) == 1 {
		return "config: " + es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d problems:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Is makes Errors match ErrInvalid and txbox.ErrInvalidConfig.
func (es Errors) Is(target error) bool { return isInvalid(target) }

// Unwrap returns the individual errors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
