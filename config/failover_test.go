package config

import (
	"context"
	"log/slog"
	"testing"
)

// TestOpenStoreKeepsTargetSessionAttrs: a multi-host DSN with
// target_session_attrs=read-write reaches the pool as given (every host,
// and the read-write check), so that the relay follows the primary across
// a failover (docs/operations.md, "Database failover"). The pool connects
// lazily: nothing listens on the hosts.
func TestOpenStoreKeepsTargetSessionAttrs(t *testing.T) {
	t.Parallel()
	dsn := "postgres://u@127.0.0.1:1,127.0.0.1:2/db?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
	c, err := Load(Source{Set: []string{"database.dialect=postgres", "database.dsn=" + dsn}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.OpenStore(context.Background(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cc := st.Pool.Config().ConnConfig
	if cc.Port != 1 || len(cc.Fallbacks) != 1 || cc.Fallbacks[0].Port != 2 {
		t.Errorf("the pool's hosts: port %d, fallbacks %+v; want ports 1 and 2", cc.Port, cc.Fallbacks)
	}
	if cc.ValidateConnect == nil {
		t.Error("the pool does not check target_session_attrs=read-write")
	}
}
