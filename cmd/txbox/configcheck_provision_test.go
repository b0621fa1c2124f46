package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestConfigCheckConnectNATSProvision: with `provision: true` on a NATS
// sender, `config check --connect` reports a missing stream as created
// by the relay at start, says what it verified (no overlapping stream,
// the account's room, the credentials' stream create request) and what
// it did not, exits 0, and creates nothing; it fails, naming why, when
// the subjects overlap another stream's or the credentials may not
// create streams.
func TestConfigCheckConnectNATSProvision(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	js := natstest.JetStream(t, testenv.NATSURL)
	dir := t.TempDir()
	db := filepath.Join(dir, "t.db")
	if code, _, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	check := func(t *testing.T, url, stream, prefix string, env []string) (int, string, string) {
		t.Helper()
		y := fmt.Sprintf("database: { dsn: %q }\nsenders:\n  s: { type: nats, url: %q, provision: true, provision-stream: %s, user: relay, password-env: PW }\n"+
			"defaults: { route: { subject: \"%s.{event_type}\" } }\nevents: { order-created: {} }\n", db, url, stream, prefix)
		if url == testenv.NATSURL {
			y = strings.Replace(y, ", user: relay, password-env: PW", "", 1)
		}
		path := filepath.Join(t.TempDir(), "txbox.yaml")
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return runInProcess(t, env, "config", "check", "--config", path, "--connect", "--timeout", "5s")
	}

	t.Run("will be created", func(t *testing.T) {
		t.Parallel()
		stream := testenv.UniqueName("PROVCHECK_")
		code, out, errOut := check(t, testenv.NATSURL, stream, strings.ToLower(stream), nil)
		if code != exitOK || !strings.Contains(out, "all checks passed") {
			t.Fatalf("code %d, want 0\n%s%s", code, out, errOut)
		}
		for _, want := range []string{"CREATED AT START by provision: true", "create stream \"" + stream + "\"",
			"Verified: no other stream binds or overlaps the subjects", "room for a stream",
			"may send the stream create request", "Not verified: "} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		if strings.Contains(out+errOut, "set provision: true") || strings.Contains(out, "MISSING") {
			t.Errorf("the stream is reported missing:\n%s%s", out, errOut)
		}
		if _, err := js.Stream(context.Background(), stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("config check created stream %s (or could not tell: %v)", stream, err)
		}
	})

	t.Run("overlap", func(t *testing.T) {
		t.Parallel()
		stream := testenv.UniqueName("PROVCHECK_")
		prefix := strings.ToLower(stream)
		other := stream + "_OTHER"
		// Another stream binds part of prefix.>: the relay's provision
		// could not bind prefix.> without overlapping it.
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: other, Subjects: []string{prefix + ".order-paid"}, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), other) })
		code, out, errOut := check(t, testenv.NATSURL, stream, prefix, nil)
		if code != exitFailure || !strings.Contains(out, "provision: true could not create it at start") || !strings.Contains(out, "overlaps") ||
			!strings.Contains(errOut, "could not create at start") {
			t.Fatalf("code %d, want 1 naming the overlap\n%s%s", code, out, errOut)
		}
	})

	t.Run("credentials may not create streams", func(t *testing.T) {
		t.Parallel()
		ns, err := natsserver.NewServer(&natsserver.Options{
			Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"),
			Users: []*natsserver.User{{Username: "relay", Password: "Nats-Pw-3", Permissions: &natsserver.Permissions{
				Publish: &natsserver.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.CREATE.>"}}}}},
			NoLog: true, NoSigs: true, DisableJetStreamBanner: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("embedded NATS did not start within 10s")
		}
		code, out, errOut := check(t, ns.ClientURL(), "DENIED", "denied", []string{"PW=Nats-Pw-3"})
		if code != exitFailure || !strings.Contains(out, "may not allow") {
			t.Fatalf("code %d, want 1 saying the credentials may not create the stream\n%s%s", code, out, errOut)
		}
	})
}
