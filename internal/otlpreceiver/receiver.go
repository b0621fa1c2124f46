// Package otlpreceiver is an in-process OTLP trace receiver for tests: it
// serves the OTLP/HTTP (protobuf) and OTLP/gRPC trace endpoints, decodes
// every export request with the OTLP protobuf types, and keeps the spans
// so a test can check what a process exported (the relay's batch and
// message spans, their links, the trace an order runs through).
package otlpreceiver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"encoding/pem"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened for assertions. Ids are hex.
type Span struct {
	Service      string // the resource's service.name
	Name         string
	Kind         string // SPAN_KIND_PRODUCER, ...
	TraceID      string
	SpanID       string
	ParentSpanID string
	Links        []Link
	Attributes   map[string]string // every attribute, printed
	StatusError  bool
}

// Link is one span link.
type Link struct{ TraceID, SpanID string }

// Receiver collects the spans exported to it. Its methods are safe for
// concurrent use.
type Receiver struct {
	mu      sync.Mutex
	spans   []Span
	headers []map[string]string // per export request, lower-case names
	// HTTPURL is the OTLP/HTTP endpoint (http://127.0.0.1:port, the traces
	// path is /v1/traces) and GRPCURL the OTLP/gRPC one.
	HTTPURL, GRPCURL string
	// HTTPSURL and GRPCSURL are the same over TLS, with a certificate for
	// 127.0.0.1 signed by the CA in the PEM file CAFile.
	HTTPSURL, GRPCSURL, CAFile string
}

// Start serves both endpoints on loopback until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(hl) }()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, grpcService{r: r})
	go func() { _ = gs.Serve(gl) }()
	// TLS: httptest's certificate (127.0.0.1) for both protocols.
	ts := httptest.NewUnstartedServer(mux)
	ts.StartTLS()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gts := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&ts.TLS.Certificates[0])))
	coltracepb.RegisterTraceServiceServer(gts, grpcService{r: r})
	go func() { _ = gts.Serve(tl) }()
	r.CAFile = filepath.Join(t.TempDir(), "otlp-ca.pem")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(r.CAFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gs.Stop()
		gts.Stop()
		_ = hs.Close()
		ts.Close()
	})
	r.HTTPURL = "http://" + hl.Addr().String()
	r.GRPCURL = "http://" + gl.Addr().String()
	r.HTTPSURL = ts.URL
	r.GRPCSURL = "https://" + tl.Addr().String()
	return r
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = http.MaxBytesReader(w, req.Body, 64<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct+", want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := map[string]string{}
	for k, v := range req.Header {
		h[http.CanonicalHeaderKey(k)] = v[0]
	}
	r.add(&msg, h)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

type grpcService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (g grpcService) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	h := map[string]string{}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, v := range md {
		h[http.CanonicalHeaderKey(k)] = v[0]
	}
	g.r.add(req, h)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest, headers map[string]string) {
	var spans []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, Name: s.GetName(), Kind: s.GetKind().String(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Attributes: attrs(s.GetAttributes()),
					StatusError: s.GetStatus().GetCode().String() == "STATUS_CODE_ERROR",
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				spans = append(spans, sp)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, spans...)
	r.headers = append(r.headers, headers)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			out[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

// Spans returns a copy of the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests returns the headers of each export request received so far
// (canonical names; gRPC metadata too).
func (r *Receiver) Requests() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]string(nil), r.headers...)
}
