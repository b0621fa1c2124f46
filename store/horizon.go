package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// HorizonInspector is implemented by drivers whose ordered claim has a
// commit horizon (PostgreSQL; docs/concepts.md, "Ordering"). The oldest
// transaction of the whole cluster that holds a transaction id, in any
// database, prepared transactions included, holds the horizon: no row of
// an ordered type inserted after it began can be claimed until it ends.
// The admin API, its dashboard and /readyz name it.
type HorizonInspector interface {
	// OutboxHorizonHolder returns the oldest transaction that holds a
	// transaction id, other than the caller's own session, or nil when
	// none does. It is one query over the server's activity views;
	// callers cache it for a few seconds.
	OutboxHorizonHolder(ctx context.Context) (*HorizonHolder, error)
}

// FenceInspector is the former name of HorizonInspector, with the former
// name of its method. The in-tree drivers implement both; a caller that
// has moved asserts HorizonInspector.
//
// Deprecated: use HorizonInspector.
type FenceInspector interface {
	// OutboxFenceHolder is the former name of
	// HorizonInspector.OutboxHorizonHolder.
	//
	// Deprecated: use HorizonInspector.OutboxHorizonHolder.
	OutboxFenceHolder(ctx context.Context) (*HorizonHolder, error)
}

// FenceHolder is the former name of HorizonHolder.
//
// Deprecated: use HorizonHolder.
type FenceHolder = HorizonHolder

// HorizonHolder is the transaction that holds the commit horizon back.
type HorizonHolder struct {
	// PID is the server process of the session, 0 for a prepared
	// transaction.
	PID int `json:"pid,omitempty"`
	// Prepared is the global id of a prepared transaction (PREPARE
	// TRANSACTION), empty for a session's transaction.
	Prepared string `json:"prepared,omitempty"`
	// Database, User and Application describe the session (Application
	// is its application_name); for a prepared transaction, its
	// database and owner.
	Database    string `json:"database,omitempty"`
	User        string `json:"user,omitempty"`
	Application string `json:"application,omitempty"`
	// State is the session's state ("active", "idle in transaction",
	// ...), "prepared" for a prepared transaction. Empty when the server
	// does not show it to this role.
	State string `json:"state,omitempty"`
	// XID is the transaction id it holds, with its epoch.
	XID uint64 `json:"xid"`
	// Age is how long the transaction has been open (prepared, for a
	// prepared transaction), on the database clock; zero when the server
	// does not show it to this role.
	Age time.Duration `json:"age"`
}

// Name names the holder for people: "pid 4242 (user app, database shop,
// application psql, idle in transaction)", or "prepared transaction
// \"gid\" (user app, database shop)".
func (h *HorizonHolder) Name() string {
	name := fmt.Sprintf("pid %d", h.PID)
	if h.Prepared != "" {
		name = fmt.Sprintf("prepared transaction %q", h.Prepared)
	}
	var parts []string
	for _, p := range [][2]string{{"user", h.User}, {"database", h.Database}, {"application", h.Application}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	if h.State != "" && h.Prepared == "" {
		parts = append(parts, h.State)
	}
	if len(parts) == 0 {
		return name
	}
	return name + " (" + strings.Join(parts, ", ") + ")"
}
