package config

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
)

// Accepted values of tracing.protocol and OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	TracingHTTP = "http/protobuf"
	TracingGRPC = "grpc"
)

// DefaultTracingServiceName is the service.name of the relay's spans
// when neither tracing.service-name nor OTEL_SERVICE_NAME (nor a
// service.name in OTEL_RESOURCE_ATTRIBUTES) sets one.
const DefaultTracingServiceName = "txbox"

// Tracing configures the export of the relay's spans over OTLP
// (docs/operations.md, "Tracing"): a span per batch linked to the
// producers' spans, and a span per message continuing its producer's
// trace. Each key, when set, wins over the standard OTEL_ variable of the
// same meaning, which applies otherwise; TXBOX_TRACING_* override the file
// as for every key. The headers, which usually carry an API key, never
// appear in the file.
type Tracing struct {
	// Enabled exports spans. Defaults to true when tracing.endpoint,
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
	// set or OTEL_TRACES_EXPORTER is otlp, false otherwise.
	// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off
	// whatever the file says.
	Enabled *bool `yaml:"enabled"`
	// Endpoint is the collector's URL: http:// (plain text) or https://,
	// host and port, and for http/protobuf optionally the path (defaults
	// to /v1/traces). Defaults to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then
	// OTEL_EXPORTER_OTLP_ENDPOINT, then the exporter's localhost:4318
	// (http/protobuf) or localhost:4317 (grpc), over TLS unless
	// OTEL_EXPORTER_OTLP_INSECURE is true.
	Endpoint string `yaml:"endpoint"`
	// Protocol is http/protobuf or grpc. Defaults to
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL,
	// then http/protobuf.
	Protocol string `yaml:"protocol"`
	// HeadersEnv names an environment variable holding the headers sent
	// with every export, as name=value pairs separated by commas, values
	// URL-encoded (the format of OTEL_EXPORTER_OTLP_HEADERS).
	// HeadersFile names a file holding them instead (a mounted secret;
	// newlines separate pairs too). Either replaces
	// OTEL_EXPORTER_OTLP_HEADERS. Defaults to none.
	HeadersEnv  string `yaml:"headers-env"`
	HeadersFile string `yaml:"headers-file"`
	// TLS configures an https:// endpoint (a private CA, a client
	// certificate). Defaults to the system roots, or
	// OTEL_EXPORTER_OTLP_CERTIFICATE and _CLIENT_CERTIFICATE/_CLIENT_KEY.
	TLS *TLS `yaml:"tls"`
	// SampleRatio is the share of traces the relay starts that it
	// records, from 0 to 1; a message whose producer's trace was sampled
	// or not follows its producer (parent-based). Defaults to
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, then 1 (every
	// trace, parent-based).
	SampleRatio *float64 `yaml:"sample-ratio"`
	// ServiceName is the service.name resource attribute of the spans.
	// Defaults to OTEL_SERVICE_NAME, then txbox.
	ServiceName string `yaml:"service-name"`
}

// TracingExport is the tracing block resolved against the OTEL_
// environment variables: what `txbox relay` exports spans with. A field
// left empty is left to the exporter, which reads its OTEL_EXPORTER_OTLP_
// variables itself (endpoint, headers, certificates, timeout,
// compression).
type TracingExport struct {
	// Protocol is TracingHTTP or TracingGRPC.
	Protocol string
	// Endpoint is the collector URL from tracing.endpoint; "" leaves it
	// to the exporter.
	Endpoint string
	// Headers come from tracing.headers-env or -file; nil leaves them to
	// the exporter. They are secrets: never log them.
	Headers map[string]string
	// TLS is tracing.tls built, nil when unset.
	TLS *tls.Config
	// Sampler is an OTEL_TRACES_SAMPLER name (parentbased_traceidratio,
	// always_on, ...) and SamplerRatio its argument for the ratio ones.
	Sampler      string
	SamplerRatio float64
	// ServiceName is tracing.service-name; "" leaves service.name to
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, then
	// DefaultTracingServiceName.
	ServiceName string
}

// samplers are the OTEL_TRACES_SAMPLER values the Go SDK implements, and
// whether each takes a ratio argument.
var samplers = map[string]bool{
	"always_on": false, "always_off": false, "traceidratio": true,
	"parentbased_always_on": false, "parentbased_always_off": false, "parentbased_traceidratio": true,
}

func (c *Config) validateTracing(d *decoder) {
	t := &c.Tracing
	chk := senderCheck{d: d, p: "tracing"}
	if t.Protocol != "" && t.Protocol != TracingHTTP && t.Protocol != TracingGRPC {
		chk.fail("protocol", "must be %s or %s, not %q", TracingHTTP, TracingGRPC, clip(t.Protocol))
	}
	if t.Endpoint != "" {
		if msg := checkEndpoint(t.Endpoint); msg != "" {
			chk.fail("endpoint", "%s", msg)
		} else if strings.HasPrefix(t.Endpoint, "http://") && t.TLS.on() {
			chk.fail("tls", "is set but the endpoint is http:// (plain text): use https://")
		}
	}
	chk.secret("headers", t.HeadersEnv, t.HeadersFile, false)
	t.TLS.check(chk.sub("tls"))
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		chk.fail("sample-ratio", "must be from 0 to 1, not %g", *r)
	}
}

// checkEndpoint returns what is wrong with an OTLP endpoint URL, or "".
func checkEndpoint(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		return fmt.Sprintf("must be an http:// or https:// URL with a host, such as http://localhost:4318, not %q", clip(raw))
	case u.User != nil:
		return "must not carry credentials: send them as a header (headers-env or headers-file)"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not have a query or a fragment"
	}
	return ""
}

// TracingExport resolves the tracing block against the environment
// (getenv, os.Getenv in the relay) and reads the headers and TLS files.
// It returns nil when tracing is off. An error names the key or the
// variable at fault and never contains a header's value; logger gets the
// insecure-skip-verify warning.
func (c *Config) TracingExport(getenv func(string) string, logger *slog.Logger) (*TracingExport, error) {
	t := &c.Tracing
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	exporter := strings.ToLower(env("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "", "otlp", "none":
	default:
		return nil, &Error{Path: "OTEL_TRACES_EXPORTER", Msg: fmt.Sprintf("txbox exports otlp (or none), not %q", clip(exporter))}
	}
	on := t.Endpoint != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || exporter == "otlp"
	if t.Enabled != nil {
		on = *t.Enabled
	}
	if !on || exporter == "none" || strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	x := &TracingExport{Protocol: t.Protocol, Endpoint: t.Endpoint, ServiceName: t.ServiceName}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if x.Protocol != "" {
			break
		}
		switch v := env(k); v {
		case "":
		case TracingHTTP, TracingGRPC:
			x.Protocol = v
		default:
			return nil, &Error{Path: k, Msg: fmt.Sprintf("must be %s or %s (the only protocols txbox exports), not %q", TracingHTTP, TracingGRPC, clip(v))}
		}
	}
	if x.Protocol == "" {
		x.Protocol = TracingHTTP
	}
	raw, err := readSecret(getenv, "tracing", "headers", t.HeadersEnv, t.HeadersFile)
	if err != nil {
		return nil, err
	}
	if raw != "" {
		if x.Headers, err = parseHeaders(raw); err != nil {
			key := "tracing.headers-env"
			if t.HeadersEnv == "" {
				key = "tracing.headers-file"
			}
			return nil, &Error{Path: key, Msg: err.Error()}
		}
	}
	if x.TLS, err = t.TLS.build("tracing.tls", logger); err != nil {
		return nil, err
	}
	x.Sampler, x.SamplerRatio, err = sampler(t.SampleRatio, env)
	if err != nil {
		return nil, err
	}
	return x, nil
}

// sampler resolves tracing.sample-ratio, else OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG, else parent-based always-on.
func sampler(ratio *float64, env func(string) string) (string, float64, error) {
	if ratio != nil {
		return "parentbased_traceidratio", *ratio, nil
	}
	name := strings.ToLower(env("OTEL_TRACES_SAMPLER"))
	if name == "" {
		return "parentbased_always_on", 1, nil
	}
	takesArg, ok := samplers[name]
	if !ok {
		return "", 0, &Error{Path: "OTEL_TRACES_SAMPLER", Msg: fmt.Sprintf("must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio, not %q", clip(name))}
	}
	r := 1.0
	if arg := env("OTEL_TRACES_SAMPLER_ARG"); takesArg && arg != "" {
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			return "", 0, &Error{Path: "OTEL_TRACES_SAMPLER_ARG", Msg: fmt.Sprintf("must be a ratio from 0 to 1 for %s, not %q", name, clip(arg))}
		}
		r = f
	}
	return name, r, nil
}

// parseHeaders parses name=value pairs separated by commas or newlines,
// values URL-encoded. Errors say which pair is wrong, never its content.
func parseHeaders(raw string) (map[string]string, error) {
	out := map[string]string{}
	pairs := strings.FieldsFunc(raw, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' })
	for i, p := range pairs {
		if strings.TrimSpace(p) == "" {
			continue
		}
		name, value, ok := strings.Cut(p, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t:") {
			return nil, fmt.Errorf("pair %d is not name=value", i+1)
		}
		v, err := url.PathUnescape(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("pair %d (%s): the value is not URL-encoded text", i+1, name)
		}
		out[name] = v
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("holds no name=value pair")
	}
	return out, nil
}
