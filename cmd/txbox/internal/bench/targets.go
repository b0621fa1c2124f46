package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// target is one fresh destination for one drain run (a JetStream stream,
// a Kafka topic, a RabbitMQ queue, a Redis stream, a webhook path): both
// the relay and the naive loop deliver to it, and count tells how many
// messages arrived.
type target interface {
	// senderYAML is the body of senders.main in the relay's configuration.
	senderYAML() string
	// routeYAML is defaults.route.
	routeYAML() string
	// naiveArgs are the naive loop's flags naming the destination.
	naiveArgs() []string
	count(ctx context.Context) (int64, error)
	close()
}

// brokers holds the connections the parent uses to create and count
// destinations, opened on first use.
type brokers struct {
	o *Options

	mu     sync.Mutex
	nc     *nats.Conn
	js     jetstream.JetStream
	kafka  *kfake.Cluster
	kadm   *kadm.Client
	kcl    *kgo.Client
	rabbit *amqp.Connection
	redis  *redis.Client
	hooks  *hookServer
}

func (b *brokers) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nc != nil {
		b.nc.Close()
	}
	if b.kcl != nil {
		b.kcl.Close()
	}
	if b.kafka != nil {
		b.kafka.Close()
	}
	if b.rabbit != nil {
		_ = b.rabbit.Close()
	}
	if b.redis != nil {
		_ = b.redis.Close()
	}
	if b.hooks != nil {
		b.hooks.close()
	}
}

func (b *brokers) newTarget(ctx context.Context, kind string) (target, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	name := uniqueName("bench")
	switch kind {
	case "nats":
		if b.nc == nil {
			nc, err := nats.Connect(b.o.NATSURL, nats.Timeout(5*time.Second))
			if err != nil {
				return nil, fmt.Errorf("NATS at --nats %s: %w", b.o.NATSURL, err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				nc.Close()
				return nil, err
			}
			b.nc, b.js = nc, js
		}
		// File storage, the server's defaults otherwise (2-minute
		// duplicate window for Nats-Msg-Id).
		st, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: strings.ToUpper(name), Subjects: []string{name + ".>"},
			Storage: jetstream.FileStorage})
		if err != nil {
			return nil, fmt.Errorf("create JetStream stream: %w", err)
		}
		return &natsTarget{b: b, subj: name, stream: st}, nil
	case "kafka":
		if b.kafka == nil {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				return nil, fmt.Errorf("start kfake: %w", err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				c.Close()
				return nil, err
			}
			b.kafka, b.kcl, b.kadm = c, cl, kadm.NewClient(cl)
		}
		if _, err := b.kadm.CreateTopic(ctx, 3, 1, nil, name); err != nil {
			return nil, fmt.Errorf("create kfake topic: %w", err)
		}
		return &kafkaTarget{b: b, topic: name}, nil
	case "rabbitmq":
		if b.rabbit == nil {
			c, err := amqp.Dial(b.o.RabbitURL)
			if err != nil {
				return nil, fmt.Errorf("RabbitMQ at --rabbitmq: %w", err)
			}
			b.rabbit = c
		}
		ch, err := b.rabbit.Channel()
		if err != nil {
			return nil, err
		}
		defer ch.Close()
		if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
			return nil, fmt.Errorf("declare queue: %w", err)
		}
		return &rabbitTarget{b: b, queue: name}, nil
	case "redis":
		if b.redis == nil {
			b.redis = redis.NewClient(&redis.Options{Addr: b.o.RedisAddr})
		}
		if err := b.redis.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("Redis at --redis %s: %w", b.o.RedisAddr, err)
		}
		return &redisTarget{b: b, stream: name}, nil
	case "webhook":
		if b.hooks == nil {
			h, err := newHookServer()
			if err != nil {
				return nil, err
			}
			b.hooks = h
		}
		return &webhookTarget{h: b.hooks, path: "/" + name, counter: b.hooks.counter("/" + name)}, nil
	}
	return nil, fmt.Errorf("unknown sender %q", kind)
}

type natsTarget struct {
	b      *brokers
	subj   string
	stream jetstream.Stream
}

func (t *natsTarget) senderYAML() string {
	return fmt.Sprintf("type: nats\nurl: %q", t.b.o.NATSURL)
}
func (t *natsTarget) routeYAML() string {
	return fmt.Sprintf("{ subject: %q }", t.subj+".{event_type}")
}
func (t *natsTarget) naiveArgs() []string {
	return []string{"--sender", "nats", "--url", t.b.o.NATSURL, "--dest", t.subj + "." + benchType}
}
func (t *natsTarget) count(ctx context.Context) (int64, error) {
	info, err := t.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int64(info.State.Msgs), nil
}
func (t *natsTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = t.b.js.DeleteStream(ctx, t.stream.CachedInfo().Config.Name)
}

type kafkaTarget struct {
	b     *brokers
	topic string
}

func (t *kafkaTarget) senderYAML() string {
	return fmt.Sprintf("type: kafka\nbrokers: [%q]", t.b.kafka.ListenAddrs()[0])
}
func (t *kafkaTarget) routeYAML() string { return fmt.Sprintf("{ topic: %q }", t.topic) }
func (t *kafkaTarget) naiveArgs() []string {
	return []string{"--sender", "kafka", "--url", t.b.kafka.ListenAddrs()[0], "--dest", t.topic}
}
func (t *kafkaTarget) count(ctx context.Context) (int64, error) {
	offs, err := t.b.kadm.ListEndOffsets(ctx, t.topic)
	if err != nil {
		return 0, err
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, offs.Error()
}
func (t *kafkaTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = t.b.kadm.DeleteTopics(ctx, t.topic)
}

type rabbitTarget struct {
	b     *brokers
	queue string
}

func (t *rabbitTarget) senderYAML() string {
	return fmt.Sprintf("type: rabbitmq\nurl: %q", t.b.o.RabbitURL)
}
func (t *rabbitTarget) routeYAML() string { return fmt.Sprintf("{ routing-key: %q }", t.queue) }
func (t *rabbitTarget) naiveArgs() []string {
	return []string{"--sender", "rabbitmq", "--url", t.b.o.RabbitURL, "--dest", t.queue}
}
func (t *rabbitTarget) count(context.Context) (int64, error) {
	ch, err := t.b.rabbit.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(t.queue, true, false, false, false, nil)
	return int64(q.Messages), err
}
func (t *rabbitTarget) close() {
	if ch, err := t.b.rabbit.Channel(); err == nil {
		_, _ = ch.QueueDelete(t.queue, false, false, false)
		_ = ch.Close()
	}
}

type redisTarget struct {
	b      *brokers
	stream string
}

func (t *redisTarget) senderYAML() string {
	return fmt.Sprintf("type: redis\naddr: %q", t.b.o.RedisAddr)
}
func (t *redisTarget) routeYAML() string { return fmt.Sprintf("{ stream: %q }", t.stream) }
func (t *redisTarget) naiveArgs() []string {
	return []string{"--sender", "redis", "--url", t.b.o.RedisAddr, "--dest", t.stream}
}
func (t *redisTarget) count(ctx context.Context) (int64, error) {
	return t.b.redis.XLen(ctx, t.stream).Result()
}
func (t *redisTarget) close() { _ = t.b.redis.Del(context.Background(), t.stream).Err() }

// hookServer is the webhook endpoint of the drain: it answers 204 to
// every POST and counts them per path.
type hookServer struct {
	srv  *http.Server
	addr string
	mu   sync.Mutex
	byP  map[string]*atomic.Int64
}

func newHookServer() (*hookServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hookServer{addr: ln.Addr().String(), byP: map[string]*atomic.Int64{}}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

func (h *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	c := h.byP[r.URL.Path]
	h.mu.Unlock()
	if r.Method != http.MethodPost || c == nil {
		http.NotFound(w, r)
		return
	}
	c.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookServer) counter(path string) *atomic.Int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := &atomic.Int64{}
	h.byP[path] = c
	return c
}

func (h *hookServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

type webhookTarget struct {
	h       *hookServer
	path    string
	counter *atomic.Int64
}

func (t *webhookTarget) url() string { return "http://" + t.h.addr + t.path }
func (t *webhookTarget) senderYAML() string {
	return fmt.Sprintf("type: webhook\nurl: %q", t.url())
}
func (t *webhookTarget) routeYAML() string { return fmt.Sprintf("{ url: %q }", t.url()) }
func (t *webhookTarget) naiveArgs() []string {
	return []string{"--sender", "webhook", "--url", t.url(), "--dest", t.path}
}
func (t *webhookTarget) count(context.Context) (int64, error) { return t.counter.Load(), nil }
func (t *webhookTarget) close() {
	t.h.mu.Lock()
	delete(t.h.byP, t.path)
	t.h.mu.Unlock()
}
