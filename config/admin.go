package config

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/txbox/txbox/admin"
)

// DefaultAdminListen is admin.listen: loopback only.
const DefaultAdminListen = admin.DefaultListen

// Admin configures the admin HTTP API and dashboard that `txbox relay`
// serves when Enabled (docs/operations.md). The tokens themselves never
// appear in the file: each comes from an environment variable (-env) or a
// file (-file) the keys name.
type Admin struct {
	// Enabled starts the admin server. Defaults to false.
	Enabled bool `yaml:"enabled"`
	// Listen is the host:port to listen on. Defaults to 127.0.0.1:8089;
	// port 0 picks a free port (the log says which).
	Listen string `yaml:"listen"`
	// ReadTokenEnv names the environment variable holding the read
	// token, which may read everything. ReadTokenFile names a file
	// holding it instead (trailing white space is ignored).
	ReadTokenEnv  string `yaml:"read-token-env"`
	ReadTokenFile string `yaml:"read-token-file"`
	// AdminTokenEnv and AdminTokenFile do the same for the admin token,
	// which may also retry, resolve and delete dead letters. At least one
	// of the two tokens is required when Enabled.
	AdminTokenEnv  string `yaml:"admin-token-env"`
	AdminTokenFile string `yaml:"admin-token-file"`
	// AllowedHosts are the Host header names (no port) requests may
	// carry. Defaults to localhost, 127.0.0.1 and ::1; list the name
	// clients use when listening on another address.
	AllowedHosts []string `yaml:"allowed-hosts"`
}

func (c *Config) validateAdmin(d *decoder) {
	a := &c.Admin
	if a.Listen == "" {
		a.Listen = DefaultAdminListen
	}
	if _, port, err := net.SplitHostPort(a.Listen); err != nil || port == "" {
		d.fail("admin.listen", nil, "must be host:port, such as %s", DefaultAdminListen)
	}
	for _, k := range []struct{ key, env, file string }{
		{"admin.read-token", a.ReadTokenEnv, a.ReadTokenFile},
		{"admin.admin-token", a.AdminTokenEnv, a.AdminTokenFile},
	} {
		checkEnvName(d, k.key+"-env", k.env)
		if k.env != "" && k.file != "" {
			d.fail(k.key+"-file", nil, "set %s-env or %s-file, not both", k.key, k.key)
		}
	}
	if a.Enabled && a.ReadTokenEnv == "" && a.ReadTokenFile == "" && a.AdminTokenEnv == "" && a.AdminTokenFile == "" {
		d.fail("admin.enabled", nil, "needs a token: set admin.admin-token-env or admin.admin-token-file (and/or the read-token keys)")
	}
	for i, h := range a.AllowedHosts {
		bare := strings.Trim(h, "[]")
		ipv6 := strings.Contains(bare, ":") && net.ParseIP(bare) != nil
		if bare == "" || strings.ContainsAny(bare, " /\t@") || strings.Contains(bare, ":") && !ipv6 {
			d.fail(fmt.Sprintf("admin.allowed-hosts[%d]", i), nil, "must be a host name or IP address without port, not %q", clip(h))
		}
	}
}

// AdminTokens reads the admin server's tokens from the environment
// variables or files the admin keys name. An error names the key; it
// never contains a token.
func (c *Config) AdminTokens(getenv func(string) string) (read, adminTok string, err error) {
	a := &c.Admin
	read, err = loadToken("admin.read-token", a.ReadTokenEnv, a.ReadTokenFile, getenv)
	if err != nil {
		return "", "", err
	}
	adminTok, err = loadToken("admin.admin-token", a.AdminTokenEnv, a.AdminTokenFile, getenv)
	if err != nil {
		return "", "", err
	}
	for _, t := range []struct{ key, tok string }{{"admin.read-token", read}, {"admin.admin-token", adminTok}} {
		if t.tok != "" && len(t.tok) < admin.MinTokenLength {
			return "", "", &Error{Path: t.key, Msg: fmt.Sprintf("the token must have at least %d characters", admin.MinTokenLength)}
		}
	}
	if read == "" && adminTok == "" {
		return "", "", &Error{Path: "admin.enabled", Msg: "no token: the variables or files the admin token keys name are empty"}
	}
	if read != "" && read == adminTok {
		return "", "", &Error{Path: "admin.read-token", Msg: "the read token must differ from the admin token"}
	}
	return read, adminTok, nil
}

func loadToken(key, env, file string, getenv func(string) string) (string, error) {
	switch {
	case env != "":
		v := ""
		if getenv != nil {
			v = strings.TrimSpace(getenv(env))
		}
		if v == "" {
			return "", &Error{Path: key + "-env", Msg: fmt.Sprintf("environment variable %s is empty or unset", env)}
		}
		return v, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			// The path error names the file, not its content.
			return "", &Error{Path: key + "-file", Msg: err.Error()}
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", &Error{Path: key + "-file", Msg: "the file is empty"}
		}
		return v, nil
	}
	return "", nil
}
