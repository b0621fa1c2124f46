package config

import (
	"strings"
	"testing"
)

// TestSettingsShowTheWALDefaults: config print shows every database.wal
// key at the value WAL mode uses, not the zero that means unset: the
// PostgreSQL driver's defaults (the slot and publication named after the
// schema and prefix, the sender timeout), the stream's, and a pause-limit
// of half the sender-timeout, the file's or the default one.
func TestSettingsShowTheWALDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       map[string]string
	}{
		{"nothing set", "database: { dialect: postgres, dsn: x, source: wal }", map[string]string{
			"database.wal.slot":             "txbox_slot",
			"database.wal.publication":      "txbox_pub",
			"database.wal.application-name": "txbox-relay",
			"database.wal.sender-timeout":   "10s",
			"database.wal.failover":         "true",
			"database.wal.window":           "20000",
			"database.wal.window-bytes":     "67108864",
			"database.wal.lane-queue":       "5000",
			"database.wal.batch-size":       "1000",
			"database.wal.status-interval":  "1s",
			"database.wal.standby-interval": "1s",
			"database.wal.pause-limit":      "5s",
			"database.wal.lag-threshold":    "1073741824",
			"defaults.batch-size":           "200",
		}},
		{"schema, prefix and sender-timeout set", "database: { dialect: postgres, dsn: x, source: wal, schema: billing, table-prefix: ob_, wal: { sender-timeout: 4s, window: 7 } }", map[string]string{
			"database.wal.slot":           "billing_ob_slot",
			"database.wal.publication":    "billing_ob_pub",
			"database.wal.sender-timeout": "4s",
			"database.wal.window":         "7",
			"database.wal.pause-limit":    "2s",
		}},
		{"pause-limit set", "database: { dialect: postgres, dsn: x, source: wal, wal: { pause-limit: 3s } }", map[string]string{
			"database.wal.pause-limit": "3s",
		}},
		{"failover off", "database: { dialect: postgres, dsn: x, source: wal, wal: { failover: false } }", map[string]string{
			"database.wal.failover": "false",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{YAML: []byte(tc.yaml)})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Setting{}
			for _, s := range c.Settings() {
				got[s.Path] = s
			}
			for p, want := range tc.want {
				if got[p].Value != want {
					t.Errorf("%s = %q (%s), want %q", p, got[p].Value, got[p].Source, want)
				}
			}
		})
	}
}

// TestFailoverReachesTheDriver: database.wal.failover turns the
// PostgreSQL driver's failover slots off only when false; unset is on.
func TestFailoverReachesTheDriver(t *testing.T) {
	t.Parallel()
	for yaml, disabled := range map[string]bool{"": false, ", wal: { failover: true }": false, ", wal: { failover: false }": true} {
		c, err := Load(Source{YAML: []byte("database: { dialect: postgres, dsn: x, source: wal" + yaml + " }")})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.postgresWAL().DisableFailover; got != disabled {
			t.Errorf("%q: DisableFailover %v, want %v", yaml, got, disabled)
		}
	}
	if _, err := Load(Source{YAML: []byte("database: { dialect: postgres, dsn: x, wal: { failover: false } }")}); err == nil ||
		!strings.Contains(err.Error(), "database.wal") {
		t.Errorf("failover with source table: %v", err)
	}
}
