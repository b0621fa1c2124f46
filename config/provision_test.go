package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
)

// openFromYAML loads yml and opens its senders (provisioning them) within
// 30s, closing them when the test ends. It returns the context to go on
// with.
func openFromYAML(t *testing.T, yml string) (context.Context, map[string]sender.Sender) {
	t.Helper()
	c, err := Load(Source{YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	senders, err := c.OpenSenders(ctx, nil, nil)
	if err != nil {
		t.Fatalf("OpenSenders: %v", err)
	}
	closeAll(t, senders)
	return ctx, senders
}

func closeAll(t *testing.T, senders map[string]sender.Sender) {
	t.Cleanup(func() {
		for _, s := range senders {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.Close(ctx)
			cancel()
		}
	})
}

// TestProvisionRoutes: the routes a sender provisions are those of the
// event types listed under events that use it, expanded, plus the
// defaults route as a template when it is the default sender; an
// explicit list replaces them; provisioning is off by default.
func TestProvisionRoutes(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{YAML: []byte(`
senders:
  main: { type: nats, provision: true }
  other: { type: nats }
  k: { type: kafka, brokers: [a:1], provision: true, provision-topics: [t1, t2] }
defaults: { sender: main, route: { subject: "events.{event_type}" } }
events:
  order-created: {}
  audit: { route: { subject: "audit.all" } }
  elsewhere: { sender: other }
`)})
	if err != nil {
		t.Fatal(err)
	}
	routes, on := c.ProvisionRoutes("main")
	var subjects []string
	for _, r := range routes {
		subjects = append(subjects, r.Subject)
	}
	if want := []string{"audit.all", "events.order-created", "events.{event_type}"}; !on || !slices.Equal(subjects, want) {
		t.Fatalf("main provisions %q (on %v), want %q", subjects, on, want)
	}
	if _, on := c.ProvisionRoutes("other"); on {
		t.Fatal("provisioning is on for a sender that did not ask for it")
	}
	routes, _ = c.ProvisionRoutes("k")
	if len(routes) != 2 || routes[0].Topic != "t1" || routes[1].Topic != "t2" {
		t.Fatalf("explicit topics: %+v", routes)
	}
}

// TestProvisionNATSFromYAML follows the README quickstart with
// provisioning on: the stream is created at start, and an event of a type
// the file does not list is stored instead of rejected.
func TestProvisionNATSFromYAML(t *testing.T) {
	t.Parallel()
	stream := testenv.UniqueName("cfgprov_")
	prefix := testenv.UniqueName("e")
	js := natstest.JetStream(t, testenv.NATSURL)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	ctx, senders := openFromYAML(t, fmt.Sprintf(`
senders:
  main: { type: nats, url: %q, provision: true, provision-stream: %s }
defaults:
  route: { subject: "%s.{event_type}" }
events:
  order-created: { batch-size: 500 }
`, testenv.NATSURL, stream, prefix))
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s after start: %v", stream, err)
	}
	if got := st.CachedInfo().Config.Subjects; !slices.Equal(got, []string{prefix + ".>"}) {
		t.Fatalf("stream subjects = %q, want %s.>", got, prefix)
	}
	msg := &sender.Message{EventType: "invoice.paid", Payload: []byte("{}"), Route: sender.Route{Subject: prefix + ".invoice.paid"}}
	if err := senders["main"].Send(ctx, []*sender.Message{msg}); err != nil {
		t.Fatalf("event of an unlisted type after provisioning: %v", err)
	}
}

// TestProvisionNATSNothingToBind: the built-in default subject is the bare
// "{event_type}", which no stream can bind; with no type listed, start
// fails with the key path instead of provisioning nothing.
func TestProvisionNATSNothingToBind(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{YAML: []byte(fmt.Sprintf(`senders: { main: { type: nats, url: %q, provision: true } }`, testenv.NATSURL))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.OpenSenders(context.Background(), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "senders.main.provision") || !strings.Contains(err.Error(), "no route gives a subject") {
		t.Fatalf("OpenSenders = %v, want a provision error at senders.main.provision", err)
	}
}

func TestProvisionKafkaFromYAML(t *testing.T) {
	t.Parallel()
	cl, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, _ := openFromYAML(t, fmt.Sprintf(`
senders:
  k: { type: kafka, brokers: [%s], provision: true, provision-partitions: 2 }
events:
  order-created: { route: { topic: orders } }
  invoice-paid: {}
`, cl.ListenAddrs()[0]))
	kc, err := kgo.NewClient(kgo.SeedBrokers(cl.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	td, err := kadm.NewClient(kc).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"orders", "invoice-paid"} {
		if d, ok := td[topic]; !ok || len(d.Partitions) != 2 {
			t.Fatalf("topic %s after start: %+v (present %v), want 2 partitions", topic, d, ok)
		}
	}
}

func TestProvisionRabbitMQFromYAML(t *testing.T) {
	t.Parallel()
	ex := testenv.UniqueName("txbox_cfgprov_")
	conn, err := amqp.Dial(testenv.RabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(ex, false, false)
		}
	})
	openFromYAML(t, fmt.Sprintf(`
senders:
  r: { type: rabbitmq, url: %q, provision: true, provision-exchange-type: direct }
defaults: { route: { exchange: %s } }
`, testenv.RabbitURL, ex))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(ex, "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("exchange %s is not a durable direct exchange after start: %v", ex, err)
	}
	var ae *amqp.Error
	ch2, _ := conn.Channel()
	if err := ch2.ExchangeDeclare(ex, "topic", true, false, false, false, nil); !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("redeclaring %s as topic = %v, want PRECONDITION_FAILED (it is direct)", ex, err)
	}
}

// TestProvisionKeysFromEnvAndFlags: the provision keys are ordinary
// sender keys: the environment and --set reach them, lists comma-separated.
func TestProvisionKeysFromEnvAndFlags(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{
		YAML: []byte(`senders: { main: { type: nats } }`),
		Env:  []string{"TXBOX_SENDERS_MAIN_PROVISION=true", "TXBOX_SENDERS_MAIN_PROVISION_SUBJECTS=a.>,b.c"},
		Set:  []string{"senders.main.provision-stream=ORDERS", "senders.hooks.type=rabbitmq", "senders.hooks.url=amqp://h/", "senders.hooks.provision=true", "defaults.sender=main"},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := c.Senders["main"].NATS
	if !n.Provision || n.ProvisionStream != "ORDERS" || !slices.Equal(n.ProvisionSubjects, []string{"a.>", "b.c"}) {
		t.Fatalf("nats provision settings = %+v", n)
	}
	if !c.Senders["hooks"].RabbitMQ.Provision {
		t.Fatal("--set senders.hooks.provision=true did not reach a sender the file does not define")
	}
}
