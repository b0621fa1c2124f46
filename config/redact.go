package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/txbox/txbox/sender"
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

// kvSecret matches the secret parameters of a PostgreSQL key=value DSN
// (host=h password='s3 cret'): a quoted value, or an unquoted one up to
// white space, backslash escapes included, as libpq reads them.
var kvSecret = regexp.MustCompile(`(?i)((?:^|\s)(?:password|passwd|pwd|sslpassword|token|secret|access_token)\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])*\\?)`)

// safeQueryParams are the query parameters whose values print: settings
// of the database drivers and brokers txbox connects to that are never
// secrets. Every other query value of a DSN or URL is redacted, because a
// webhook or broker URL may carry a key (?api_key=…, ?sig=…) under any
// name.
var safeQueryParams = map[string]bool{
	// PostgreSQL (libpq and pgx).
	"sslmode": true, "sslrootcert": true, "sslcert": true, "sslkey": true, "sslnegotiation": true,
	"connect_timeout": true, "application_name": true, "search_path": true, "target_session_attrs": true,
	"pool_max_conns": true, "pool_min_conns": true, "default_query_exec_mode": true,
	// go-sql-driver/mysql.
	"parsetime": true, "loc": true, "charset": true, "collation": true, "timeout": true,
	"readtimeout": true, "writetimeout": true, "tls": true, "multistatements": true,
	"interpolateparams": true, "maxallowedpacket": true, "transaction_isolation": true,
	// AMQP URI query parameters.
	"heartbeat": true, "connection_timeout": true, "channel_max": true, "frame_max": true,
	"auth_mechanism": true, "server_name_indication": true,
}

// urlStart matches the scheme of a URL that follows a comma: NATS takes
// a comma-separated list of server URLs. A comma anywhere else (in a
// password) does not split the string.
var urlStart = regexp.MustCompile(`,\s*[A-Za-z][A-Za-z0-9+.-]*://`)

// RedactDSN returns s with every secret it can recognise replaced by
// "xxxxx": the user-info password of a URL (postgres://u:p@h/db,
// amqp://, nats://, redis://) or a NATS token (nats://TOKEN@h), a
// go-sql-driver/mysql password (u:p@tcp(h)/db), the password of a
// PostgreSQL key=value DSN, and every query value of a DSN, URL or SQLite
// path whose parameter is not a known-safe driver setting (sslmode,
// parseTime, heartbeat, ...). A password holding a reserved character
// (',', '@', '/', '?', '#') is hidden whole; when in doubt more is hidden,
// never less.
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
		start := 0
		for _, m := range urlStart.FindAllStringIndex(s, -1) {
			spans = append(spans, urlSecrets(s, start, m[0])...)
			start = m[0] + 1
		}
		spans = append(spans, urlSecrets(s, start, len(s))...)
	} else {
		rest := 0
		if at := mysqlAt(s); at >= 0 {
			if colon := strings.IndexByte(s[:at], ':'); colon >= 0 && colon+1 < at {
				spans = append(spans, [2]int{colon + 1, at})
			}
			rest = at + 1
		}
		// A go-sql-driver DSN's parameters, a SQLite path's or file: URI's.
		spans = append(spans, querySecrets(s, rest, len(s))...)
		for _, m := range kvSecret.FindAllStringSubmatchIndex(s, -1) {
			if m[4] < m[5] {
				spans = append(spans, [2]int{m[4], m[5]})
			}
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	out := spans[:0]
	for _, sp := range spans {
		if n := len(out); n > 0 && sp[0] <= out[n-1][1] {
			if sp[1] > out[n-1][1] {
				out[n-1][1] = sp[1]
			}
			continue
		}
		out = append(out, sp)
	}
	return out
}

// urlSecrets returns the secret spans of the URL s[from:to]: the password
// (or NATS token) of its user info, and its query values and fragment.
func urlSecrets(s string, from, to int) [][2]int {
	seg := s[from:to]
	i := strings.Index(seg, "://")
	if i < 0 {
		return querySecrets(s, from, to)
	}
	base := i + 3
	rest := seg[base:]
	// The user info ends at the last '@': a password with an unescaped
	// '?', '/', '#' or '@' is hidden whole. An '@' in a query value makes
	// this hide more than the password, never less.
	at := strings.LastIndexByte(rest, '@')
	var spans [][2]int
	qfrom := base
	if at >= 0 {
		colon := strings.IndexByte(rest[:at], ':')
		switch {
		case colon >= 0 && colon+1 < at:
			spans = append(spans, [2]int{from + base + colon + 1, from + base + at})
			qfrom = base + at + 1
		case colon < 0 && at > 0 && natsScheme(seg[:i]):
			// nats://TOKEN@host: NATS puts a bare token where other
			// schemes put a user name, so the whole user info is the
			// secret.
			spans = append(spans, [2]int{from + base, from + base + at})
			qfrom = base + at + 1
		}
	}
	// Without a hidden user info, the query starts at the first '?': an
	// '@' in a query value does not hide the values before it.
	return append(spans, querySecrets(s, from+qfrom, to)...)
}

func natsScheme(scheme string) bool {
	switch strings.ToLower(strings.TrimSpace(scheme)) {
	case "nats", "tls", "ws", "wss":
		return true
	}
	return false
}

// querySecrets returns the spans of the query values in s[from:to] (after
// its first '?') whose parameter is not in safeQueryParams, bare values
// (?TOKEN) included, and of the fragment.
func querySecrets(s string, from, to int) [][2]int {
	q := strings.IndexByte(s[from:to], '?')
	if q < 0 {
		return fragmentSecret(s, from, to)
	}
	start := from + q + 1
	end := to
	if h := strings.IndexByte(s[start:to], '#'); h >= 0 {
		end = start + h
	}
	var spans [][2]int
	p := start
	for p <= end {
		n := strings.IndexAny(s[p:end], "&;")
		stop := end
		if n >= 0 {
			stop = p + n
		}
		name, _, hasValue := strings.Cut(s[p:stop], "=")
		switch {
		case !hasValue && stop > p:
			spans = append(spans, [2]int{p, stop})
		case hasValue && !safeQueryParams[strings.ToLower(name)] && p+len(name)+1 < stop:
			spans = append(spans, [2]int{p + len(name) + 1, stop})
		}
		p = stop + 1
	}
	return append(spans, fragmentSecret(s, end, to)...)
}

// fragmentSecret returns the span of the fragment (after '#') of
// s[from:to], if any: it is never sent, and a key may be written there.
func fragmentSecret(s string, from, to int) [][2]int {
	if h := strings.IndexByte(s[from:to], '#'); h >= 0 && from+h+1 < to {
		return [][2]int{{from + h + 1, to}}
	}
	return nil
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
	s := &secretSet{getenv: getenv}
	s.dsn(c.Database.DSN)
	if c.Database.DSNEnv != "" && getenv != nil {
		s.dsn(DSN(getenv(c.Database.DSNEnv)))
	}
	// Each tenant's database, as the process opens them all.
	for _, t := range c.Tenants {
		s.dsn(t.DSN)
		if t.DSNEnv != "" && getenv != nil {
			s.dsn(DSN(getenv(t.DSNEnv)))
		}
	}
	for _, snd := range c.Senders {
		switch {
		case snd.NATS != nil:
			s.dsn(snd.NATS.URL)
			s.pair(snd.NATS.PasswordEnv, snd.NATS.PasswordFile)
			s.pair(snd.NATS.TokenEnv, snd.NATS.TokenFile)
		case snd.RabbitMQ != nil:
			s.dsn(snd.RabbitMQ.URL)
			s.pair(snd.RabbitMQ.PasswordEnv, snd.RabbitMQ.PasswordFile)
		case snd.Webhook != nil:
			s.pair(snd.Webhook.HMACSecretEnv, snd.Webhook.HMACSecretFile)
			// An HTTP client's error quotes the URL, query and all.
			s.query(snd.Webhook.URL)
		case snd.Redis != nil:
			s.pair(snd.Redis.PasswordEnv, snd.Redis.PasswordFile)
		case snd.Kafka != nil && snd.Kafka.SASL != nil:
			s.pair(snd.Kafka.SASL.PasswordEnv, snd.Kafka.SASL.PasswordFile)
		}
	}
	routes := []*sender.Route{c.Defaults.Route}
	for _, t := range c.EventTypes() {
		routes = append(routes, c.Events[t].Route)
		// Each fan-out route's URL too: a partner's webhook may take
		// its token in the query.
		for i := range c.Events[t].Routes {
			routes = append(routes, &c.Events[t].Routes[i].Route)
		}
	}
	for _, r := range routes {
		if r != nil {
			s.query(r.URL)
		}
	}
	s.pair(c.Tracing.HeadersEnv, c.Tracing.HeadersFile)
	if raw, err := readSecret(orEmpty(getenv), "", "headers", c.Tracing.HeadersEnv, c.Tracing.HeadersFile); err == nil && raw != "" {
		if h, err := parseHeaders(raw); err == nil {
			for _, v := range h {
				s.add(v)
			}
		}
	}
	if read, adm, err := c.AdminTokens(getenv); err == nil {
		s.add(read)
		s.add(adm)
	}
	return s.out
}

// secretSet gathers the values Secrets returns.
type secretSet struct {
	out    []string
	getenv func(string) string
}

func (s *secretSet) add(v string) {
	if v != "" && len(v) >= 4 {
		s.out = append(s.out, v)
	}
}

// query adds the values a webhook URL hides. Only long ones are scrubbed
// from other text: every query value prints redacted, but scrubbing a
// short one (?format=json) would blank that word in every log line, and
// keys and signatures are long.
func (s *secretSet) query(u string) {
	for _, v := range passwordsIn(u) {
		if len(v) >= 8 {
			s.add(v)
		}
	}
}

func (s *secretSet) dsn(d DSN) {
	if d == "" || d.String() == string(d) {
		return
	}
	s.add(string(d))
	for _, pw := range passwordsIn(string(d)) {
		s.add(pw)
	}
}

// pair adds what a <name>-env / <name>-file pair points to; an unreadable
// file holds nothing to hide.
func (s *secretSet) pair(env, file string) {
	if env != "" && s.getenv != nil {
		s.add(s.getenv(env))
	}
	if file != "" {
		if v, err := readSecret(func(string) string { return "" }, "", "", "", file); err == nil {
			s.add(v)
		}
	}
}

// orEmpty returns getenv, or a lookup that finds nothing when it is nil.
func orEmpty(getenv func(string) string) func(string) string {
	if getenv == nil {
		return func(string) string { return "" }
	}
	return getenv
}

// passwordsIn returns the secrets RedactDSN hides in dsn, each also in
// the form a driver may echo it in: percent-decoded, unquoted.
func passwordsIn(dsn string) []string {
	var out []string
	for _, sp := range secretSpans(dsn) {
		v := dsn[sp[0]:sp[1]]
		out = append(out, v)
		if d, err := url.QueryUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if u := unquoteKV(v); u != v {
			out = append(out, u)
		}
	}
	return out
}

// unquoteKV returns a key=value DSN value as libpq reads it: without its
// quotes and backslash escapes.
func unquoteKV(v string) string {
	if !strings.ContainsAny(v, `'\`) {
		return v
	}
	v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
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

// scrubAttr replaces every secret in a log attribute's text: strings,
// errors and values that print themselves, groups member by member.
func scrubAttr(a slog.Attr, secrets []string) slog.Attr {
	if len(secrets) == 0 {
		return a
	}
	clean := func(s string) string {
		for _, sec := range secrets {
			s = strings.ReplaceAll(s, sec, redacted)
		}
		return s
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(clean(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]slog.Attr, len(attrs))
		for i, g := range attrs {
			out[i] = scrubAttr(g, secrets)
		}
		a.Value = slog.GroupValue(out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			a.Value = slog.StringValue(clean(x.Error()))
		case fmt.Stringer:
			a.Value = slog.StringValue(clean(x.String()))
		default:
			if s := fmt.Sprint(x); s != clean(s) {
				a.Value = slog.StringValue(clean(s))
			}
		}
	}
	return a
}

// lookupIn returns a getenv over env's KEY=VALUE strings.
func lookupIn(env []string) func(string) string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}
