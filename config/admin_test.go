package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const adminBase = "senders: { m: { type: nats } }\n"

// TestAdminKeys: the admin section's defaults, its key-path errors, and
// that a token can never be written in the file itself.
func TestAdminKeys(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{YAML: []byte(adminBase)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Enabled || c.Admin.Listen != "127.0.0.1:8089" {
		t.Fatalf("defaults: %+v, want off on 127.0.0.1", c.Admin)
	}
	checkLoadErrors(t, map[string]string{
		"admin: { enabled: true }":                                                             "admin.enabled: needs a token",
		"admin: { listen: 8089 }":                                                              "admin.listen: must be host:port",
		"admin: { read-token: s3cr3t-s3cr3t-s3cr3t }":                                          "admin.read-token",
		"admin: { admin-token: s3cr3t-s3cr3t-s3cr3t }":                                         "admin.admin-token",
		"admin: { admin-token-env: T, admin-token-file: /x }":                                  "admin.admin-token-file: set admin.admin-token-env or admin.admin-token-file, not both",
		"admin: { read-token-env: 'not a name' }":                                              "admin.read-token-env:",
		"admin: { enabled: yes }":                                                              "admin.enabled: must be true or false",
		"admin: { admin-token-env: T, allowed-hosts: ['evil.example:80'] }":                    "admin.allowed-hosts[0]",
		"admin: { admin-token-env: T, allowed-hosts: [''] }":                                   "admin.allowed-hosts[0]",
		"admin: { enabled: true, admin-token-env: T, allowed-hosts: [relay.internal, '::1'] }": "",
	})
}

// checkLoadErrors loads adminBase plus each YAML of cases and checks that
// the error contains the case's text ("" for no error) and never echoes
// the secret s3cr3t.
func checkLoadErrors(t *testing.T, cases map[string]string) {
	t.Helper()
	for yml, want := range cases {
		_, err := Load(Source{YAML: []byte(adminBase + yml + "\n")})
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", yml, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want it to contain %q", yml, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error echoes the secret: %v", yml, err)
		}
	}
}

// TestAdminTokens: tokens come from the named variable or file, are
// checked, and no error carries one.
func TestAdminTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(file, []byte("file-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"READ_TOK": "env-read-token-0123456789", "SHORT": "short", "SAME": "file-token-0123456789"}
	getenv := func(k string) string { return env[k] }
	load := func(yml string) *Config {
		t.Helper()
		c, err := Load(Source{YAML: []byte(adminBase + yml)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := load("admin: { enabled: true, read-token-env: READ_TOK, admin-token-file: " + file + " }\n")
	r, a, err := c.AdminTokens(getenv)
	if err != nil || r != "env-read-token-0123456789" || a != "file-token-0123456789" {
		t.Fatalf("tokens %q %q %v", r, a, err)
	}
	secrets := strings.Join(c.Secrets(getenv), " ")
	if !strings.Contains(secrets, r) || !strings.Contains(secrets, a) {
		t.Fatal("Secrets does not list the admin tokens, so Scrub would not hide them")
	}
	for yml, want := range map[string]string{
		"admin: { enabled: true, admin-token-env: SHORT }\n":                                  "admin.admin-token: the token must have at least 16",
		"admin: { enabled: true, admin-token-env: UNSET }\n":                                  "admin.admin-token-env: environment variable UNSET is empty",
		"admin: { enabled: true, admin-token-file: " + filepath.Join(dir, "missing") + " }\n": "admin.admin-token-file:",
		"admin: { enabled: true, read-token-env: SAME, admin-token-file: " + file + " }\n":    "must differ",
	} {
		_, _, err := load(yml).AdminTokens(getenv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yml, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "0123456789") || strings.Contains(err.Error(), "short")) {
			t.Errorf("%s: the error carries a token: %v", yml, err)
		}
	}
}
