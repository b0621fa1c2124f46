// Package timing is the former home of the pickup-latency probe of txbox's
// benchmarks, now internal/timing.
//
// Deprecated: it is a tool of txbox's own benchmarks (`txbox bench`, the
// e2e benchmarks), not a sender to deploy, and moved under internal/; this
// package goes in the next release.
package timing

import (
	"github.com/txbox/txbox/internal/timing"
	"github.com/txbox/txbox/sender"
)

// Recorder is a sender.Sender that notes when each message was picked up
// and acked.
//
// Deprecated: internal, see the package comment.
type Recorder = timing.Recorder

// New returns a Recorder around s.
//
// Deprecated: internal, see the package comment.
func New(s sender.Sender) *Recorder { return timing.New(s) }
