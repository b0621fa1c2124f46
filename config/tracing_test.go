package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTracingKeys: the tracing block's key-path errors, and that a header
// can never be written in the file itself.
func TestTracingKeys(t *testing.T) {
	t.Parallel()
	checkLoadErrors(t, map[string]string{
		"tracing: { protocol: http/json }":                                      "tracing.protocol: must be http/protobuf or grpc",
		"tracing: { endpoint: collector:4318 }":                                 "tracing.endpoint: must be an http:// or https:// URL",
		"tracing: { endpoint: 'ftp://collector:4318' }":                         "tracing.endpoint: must be an http:// or https:// URL",
		"tracing: { endpoint: 'https://u:s3cr3t@collector:4318' }":              "tracing.endpoint: must not carry credentials",
		"tracing: { endpoint: 'https://collector:4318/v1/traces?x=1' }":         "tracing.endpoint: must not have a query",
		"tracing: { endpoint: 'http://collector:4318', tls: { ca-file: /ca } }": "tracing.tls: is set but the endpoint is http://",
		"tracing: { tls: { cert-file: /c } }":                                   "tracing.tls.cert-file: cert-file and key-file go together",
		"tracing: { headers: 'x-api-key=s3cr3t' }":                              "tracing.headers: secrets are not written in the configuration: use headers-env or headers-file",
		"tracing: { headers-env: H, headers-file: /h }":                         "tracing.headers-env: set headers-env or headers-file, not both",
		"tracing: { headers-env: 'not a name' }":                                "tracing.headers-env:",
		"tracing: { sample-ratio: 1.5 }":                                        "tracing.sample-ratio: must be from 0 to 1",
		"tracing: { sample-ratio: half }":                                       "tracing.sample-ratio: must be a number",
		"tracing: { enabled: yes }":                                             "tracing.enabled: must be true or false",
		"tracing: { sampler: always_on }":                                       "tracing.sampler: unknown key",
		"tracing: { endpoint: 'https://collector:4317', protocol: grpc, sample-ratio: 0.25, headers-env: H, service-name: relay }": "",
	})
}

// TestTracingExport: when tracing is on, which of the file and the OTEL_
// variables wins, the sampler, the headers, and errors naming the key or
// variable without a header's value.
func TestTracingExport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	headersFile := filepath.Join(dir, "otlp-headers")
	if err := os.WriteFile(headersFile, []byte("authorization=Bearer%20s3cr3t-token\nx-tenant=acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	export := func(yml string, env map[string]string) (*TracingExport, error) {
		t.Helper()
		c, err := Load(Source{YAML: []byte(adminBase + yml + "\n")})
		if err != nil {
			t.Fatal(err)
		}
		return c.TracingExport(func(k string) string { return env[k] }, nil)
	}

	// Off unless asked for.
	for _, tc := range []struct {
		yml string
		env map[string]string
		on  bool
	}{
		{"", nil, false},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"tracing: { endpoint: 'http://c:4318' }", nil, true},
		{"tracing: { enabled: true }", nil, true},
		{"tracing: { enabled: false }", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{"tracing: { enabled: true }", map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
		{"tracing: { enabled: true }", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		x, err := export(tc.yml, tc.env)
		if err != nil || (x != nil) != tc.on {
			t.Errorf("%q with %v: %+v, %v; want on=%v", tc.yml, tc.env, x, err, tc.on)
		}
	}

	// The file wins over OTEL_; OTEL_ fills what it leaves.
	x, err := export("tracing: { enabled: true }", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"})
	if err != nil || x.Protocol != TracingGRPC || x.Sampler != "traceidratio" || x.SamplerRatio != 0.1 || x.Endpoint != "" || x.Headers != nil {
		t.Errorf("from OTEL_: %+v, %v", x, err)
	}
	x, err = export("tracing: { enabled: true, protocol: http/protobuf, sample-ratio: 0.5, service-name: relay-eu }",
		map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER": "always_off"})
	if err != nil || x.Protocol != TracingHTTP || x.Sampler != "parentbased_traceidratio" || x.SamplerRatio != 0.5 || x.ServiceName != "relay-eu" {
		t.Errorf("the file's keys: %+v, %v", x, err)
	}
	x, err = export("tracing: { enabled: true }", nil)
	if err != nil || x.Protocol != TracingHTTP || x.Sampler != "parentbased_always_on" {
		t.Errorf("defaults: %+v, %v", x, err)
	}

	// Headers from a file or a variable, URL-decoded.
	x, err = export("tracing: { enabled: true, headers-file: "+headersFile+" }", nil)
	if err != nil || x.Headers["authorization"] != "Bearer s3cr3t-token" || x.Headers["x-tenant"] != "acme" || len(x.Headers) != 2 {
		t.Errorf("headers-file: %+v, %v", x, err)
	}
	x, err = export("tracing: { enabled: true, headers-env: OTLP_H }", map[string]string{"OTLP_H": "x-api-key=s3cr3t, x-b = 2"})
	if err != nil || x.Headers["x-api-key"] != "s3cr3t" || x.Headers["x-b"] != "2" {
		t.Errorf("headers-env: %+v, %v", x, err)
	}

	for _, tc := range []struct {
		yml  string
		env  map[string]string
		want string
	}{
		{"tracing: { enabled: true, headers-env: OTLP_H }", nil, "tracing.headers-env: environment variable OTLP_H is empty"},
		{"tracing: { enabled: true, headers-env: OTLP_H }", map[string]string{"OTLP_H": "s3cr3t"}, "tracing.headers-env: pair 1 is not name=value"},
		{"tracing: { enabled: true, headers-env: OTLP_H }", map[string]string{"OTLP_H": "a=1,b=%zzs3cr3t"}, "tracing.headers-env: pair 2 (b): the value is not URL-encoded"},
		{"tracing: { enabled: true, headers-file: " + filepath.Join(dir, "missing") + " }", nil, "tracing.headers-file: cannot read"},
		{"tracing: { enabled: true }", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL: must be http/protobuf or grpc"},
		{"tracing: { enabled: true }", map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER: must be always_on"},
		{"tracing: { enabled: true }", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG: must be a ratio from 0 to 1"},
		{"", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER: txbox exports otlp (or none)"},
		{"tracing: { enabled: true, endpoint: 'https://c:4318', tls: { ca-file: " + filepath.Join(dir, "missing-ca") + " } }", nil, "tracing.tls.ca-file: cannot read"},
	} {
		_, err := export(tc.yml, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q with %v: %v, want an ErrInvalid containing %q", tc.yml, tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%q: the error echoes a header value: %v", tc.yml, err)
		}
	}
}

// TestTracingEnvOverride: TXBOX_TRACING_* override the file's tracing
// keys like every other key's.
func TestTracingEnvOverride(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{YAML: []byte(adminBase + "tracing: { endpoint: 'http://a:4318', sample-ratio: 0.5 }\n"),
		Env: []string{"TXBOX_TRACING_ENDPOINT=https://b:4318", "TXBOX_TRACING_SAMPLE_RATIO=0.1", "TXBOX_TRACING_PROTOCOL=grpc"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing.Endpoint != "https://b:4318" || *c.Tracing.SampleRatio != 0.1 || c.Tracing.Protocol != "grpc" {
		t.Fatalf("tracing = %+v, want the TXBOX_TRACING_ values", c.Tracing)
	}
	if _, err := Load(Source{YAML: []byte(adminBase), Env: []string{"TXBOX_TRACING_SAMPLE_RATIO=2"}}); err == nil ||
		!strings.Contains(err.Error(), "tracing.sample-ratio") || !strings.Contains(err.Error(), "TXBOX_TRACING_SAMPLE_RATIO") {
		t.Fatalf("a bad TXBOX_TRACING_SAMPLE_RATIO: %v, want the key and the variable named", err)
	}
}
