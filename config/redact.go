package config

import (
	"log/slog"
	"regexp"
	"sort"
	"strings"
)

// redacted replaces a secret in printed text.
const redacted = "xxxxx"

// DSN is a connection string that may contain a password. It prints
// (String, GoString, %v, %q, slog, YAML) with the password replaced by
// "xxxxx"; call Reveal to get the value to connect with.
type DSN string

// Reveal returns the DSN as configured, password included. Pass it only to
// a database or broker client, never to a log or an error message.
func (d DSN) Reveal() string { return string(d) }

// String returns the DSN with its password redacted.
func (d DSN) String() string { return RedactDSN(string(d)) }

// GoString returns the redacted DSN, so %#v of a Config prints no password.
func (d DSN) GoString() string { return `config.DSN("` + RedactDSN(string(d)) + `")` }

// Secrets returns the parts of the DSN that String hides (passwords,
// tokens), for scrubbing them from text that quotes the DSN.
func (d DSN) Secrets() []string { return passwordsIn(string(d)) }

// LogValue returns the redacted DSN for log/slog.
func (d DSN) LogValue() slog.Value { return slog.StringValue(RedactDSN(string(d))) }

// MarshalYAML writes the redacted DSN.
func (d DSN) MarshalYAML() (any, error) { return RedactDSN(string(d)), nil }

// MarshalText writes the redacted DSN (encoding/json and friends).
func (d DSN) MarshalText() ([]byte, error) { return []byte(RedactDSN(string(d))), nil }

// secretParam matches key=value pairs whose value is a secret, in URL
// query strings and PostgreSQL key=value DSNs (quoted values included).
var secretParam = regexp.MustCompile(`(?i)((?:^|[\s&?;])(?:password|passwd|pwd|sslpassword|token|secret|access_token)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&;]*)`)

// RedactDSN returns s with every password it can recognise replaced by
// "xxxxx": the user-info password of a URL (postgres://u:p@h/db,
// amqp://, nats://, redis://), a go-sql-driver/mysql password
// (u:p@tcp(h)/db), and password=/token=/secret= parameters.
func RedactDSN(s string) string {
	spans := secretSpans(s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString(redacted)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// secretSpans returns the sorted, non-overlapping [start, end) byte ranges
// of s that hold secrets.
func secretSpans(s string) [][2]int {
	var spans [][2]int
	if strings.Contains(s, "://") {
		// scheme://[user[:password]@]host... A comma-separated list of
		// URLs (NATS) is handled one by one.
		off := 0
		for _, p := range strings.Split(s, ",") {
			if a, b, ok := urlPassword(p); ok {
				spans = append(spans, [2]int{off + a, off + b})
			}
			off += len(p) + 1
		}
	} else if at := mysqlAt(s); at >= 0 {
		if colon := strings.IndexByte(s[:at], ':'); colon >= 0 && colon+1 < at {
			spans = append(spans, [2]int{colon + 1, at})
		}
	}
	for _, m := range secretParam.FindAllStringSubmatchIndex(s, -1) {
		if m[4] < m[5] {
			spans = append(spans, [2]int{m[4], m[5]})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	out := spans[:0]
	for _, sp := range spans {
		if n := len(out); n > 0 && sp[0] < out[n-1][1] {
			if sp[1] > out[n-1][1] {
				out[n-1][1] = sp[1]
			}
			continue
		}
		out = append(out, sp)
	}
	return out
}

// urlPassword finds the password in the user info of URL s.
func urlPassword(s string) (start, end int, ok bool) {
	i := strings.Index(s, "://")
	if i < 0 {
		return 0, 0, false
	}
	base := i + 3
	rest := s[base:]
	// The user info ends at the last '@' before the query. Searching past
	// the first '/' errs on the side of hiding too much: a password with
	// an unescaped '/', '#' or '@' is still hidden whole.
	stop := strings.IndexByte(rest, '?')
	if stop < 0 {
		stop = len(rest)
	}
	at := strings.LastIndexByte(rest[:stop], '@')
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.IndexByte(rest[:at], ':')
	if colon < 0 {
		// nats://TOKEN@host: NATS puts a bare token where other schemes
		// put a user name, so the whole user info is the secret.
		switch strings.ToLower(strings.TrimSpace(s[:i])) {
		case "nats", "tls", "ws", "wss":
			if at > 0 {
				return base, base + at, true
			}
		}
		return 0, 0, false
	}
	if colon+1 >= at {
		return 0, 0, false
	}
	return base + colon + 1, base + at, true
}

// mysqlAt finds the '@' that ends the user info of a go-sql-driver DSN
// (user:password@protocol(address)/dbname?params), or -1.
func mysqlAt(s string) int {
	for _, marker := range []string{"@tcp(", "@unix(", "@tcp6(", "@("} {
		if i := strings.LastIndex(s, marker); i >= 0 {
			return i
		}
	}
	if slash := strings.LastIndexByte(s, '/'); slash > 0 {
		return strings.LastIndexByte(s[:slash], '@')
	}
	return -1
}

// Secrets returns every secret value the configuration holds or points to
// through an environment variable: DSN passwords and whole DSNs, tokens,
// HMAC secrets. Scrub uses them to clean error text from drivers that echo
// what they were given.
func (c *Config) Secrets(getenv func(string) string) []string {
	var out []string
	add := func(s string) {
		if s != "" && len(s) >= 4 {
			out = append(out, s)
		}
	}
	addDSN := func(d DSN) {
		if d == "" {
			return
		}
		if d.String() != string(d) {
			add(string(d))
			for _, pw := range passwordsIn(string(d)) {
				add(pw)
			}
		}
	}
	addDSN(c.Database.DSN)
	if c.Database.DSNEnv != "" && getenv != nil {
		addDSN(DSN(getenv(c.Database.DSNEnv)))
	}
	// secret adds what a <name>-env / <name>-file pair points to; an
	// unreadable file holds nothing to hide.
	secret := func(env, file string) {
		if env != "" && getenv != nil {
			add(getenv(env))
		}
		if file != "" {
			if v, err := readSecret(func(string) string { return "" }, "", "", "", file); err == nil {
				add(v)
			}
		}
	}
	for _, s := range c.Senders {
		switch {
		case s.NATS != nil:
			addDSN(s.NATS.URL)
			secret(s.NATS.PasswordEnv, s.NATS.PasswordFile)
			secret(s.NATS.TokenEnv, s.NATS.TokenFile)
		case s.RabbitMQ != nil:
			addDSN(s.RabbitMQ.URL)
			secret(s.RabbitMQ.PasswordEnv, s.RabbitMQ.PasswordFile)
		case s.Webhook != nil:
			secret(s.Webhook.HMACSecretEnv, s.Webhook.HMACSecretFile)
		case s.Redis != nil:
			secret(s.Redis.PasswordEnv, s.Redis.PasswordFile)
		case s.Kafka != nil && s.Kafka.SASL != nil:
			secret(s.Kafka.SASL.PasswordEnv, s.Kafka.SASL.PasswordFile)
		}
	}
	secret(c.Tracing.HeadersEnv, c.Tracing.HeadersFile)
	if raw, err := readSecret(orEmpty(getenv), "", "headers", c.Tracing.HeadersEnv, c.Tracing.HeadersFile); err == nil && raw != "" {
		if h, err := parseHeaders(raw); err == nil {
			for _, v := range h {
				add(v)
			}
		}
	}
	if read, adm, err := c.AdminTokens(getenv); err == nil {
		add(read)
		add(adm)
	}
	return out
}

// orEmpty returns getenv, or a lookup that finds nothing when it is nil.
func orEmpty(getenv func(string) string) func(string) string {
	if getenv == nil {
		return func(string) string { return "" }
	}
	return getenv
}

// passwordsIn returns the secrets RedactDSN hides in dsn.
func passwordsIn(dsn string) []string {
	var out []string
	for _, sp := range secretSpans(dsn) {
		out = append(out, dsn[sp[0]:sp[1]])
	}
	return out
}

// Scrub returns err with every secret in its text replaced by "xxxxx". The
// result still unwraps to err, so errors.Is and errors.As keep working.
func Scrub(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	for _, s := range secrets {
		if s != "" {
			clean = strings.ReplaceAll(clean, s, redacted)
		}
	}
	if clean == msg {
		return err
	}
	return &scrubbedError{msg: clean, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
