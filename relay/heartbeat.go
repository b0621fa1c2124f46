package relay

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// DefaultHeartbeatInterval is how often a relay writes its heartbeat row
// (relay.heartbeat-interval). One upsert per interval: 30 statements an
// hour, which keeps an idle relay within its budget of 300 transactions
// an hour (docs/benchmarks.md, "Idle"), and an instance that died shows
// as expired within heartbeatTTLFactor intervals (6 minutes).
const DefaultHeartbeatInterval = 2 * time.Minute

// heartbeatTTLFactor: a heartbeat counts for this many intervals, so one
// late or failed beat does not make a live instance look dead.
const heartbeatTTLFactor = 3

// JobHeartbeat is txbox.JobHeartbeat.
//
// Deprecated: use txbox.JobHeartbeat.
const JobHeartbeat = txbox.JobHeartbeat

// startHeartbeat runs the heartbeat job when the store keeps heartbeat
// rows (store.Instances) and the interval is positive. r.mu is held.
func (r *Relay) startHeartbeat() {
	hb, ok := r.cfg.Store.(store.Instances)
	if !ok || r.cfg.HeartbeatInterval <= 0 {
		return
	}
	host, _ := os.Hostname()
	info := fmt.Sprintf("host=%s pid=%d go=%s", host, os.Getpid(), runtime.Version())
	params := &store.InstanceHeartbeatParams{ID: r.cfg.InstanceID, TTL: heartbeatTTLFactor * r.cfg.HeartbeatInterval, Info: info}
	r.goJob(txbox.JobHeartbeat, newJobSchedule(r.cfg.HeartbeatInterval, r.cfg.HeartbeatInterval), nil, func(ctx context.Context) (int, error) {
		// A count of 0 keeps the job out of the "changed rows" log line.
		return 0, hb.InstanceHeartbeat(ctx, params)
	})
}

// removeHeartbeat deletes this instance's heartbeat row after a graceful
// stop, so it is not listed as expired for the next hour. Best effort:
// a row left behind expires on its own.
func (r *Relay) removeHeartbeat() {
	hb, ok := r.cfg.Store.(store.Instances)
	if !ok || r.cfg.HeartbeatInterval <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeoutAfterDeadline)
	defer cancel()
	if err := hb.InstanceRemove(ctx, r.cfg.InstanceID); err != nil {
		r.log.Warn("cannot remove the heartbeat row", slog.Any("error", err))
	}
}
