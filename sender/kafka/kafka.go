package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Defaults applied by [New] to zero fields of [Config].
const (
	DefaultClientID           = "txbox"
	DefaultLinger             = 0
	DefaultMaxBufferedRecords = 10000
	DefaultDeliveryTimeout    = 10 * time.Second
	DefaultDialTimeout        = 5 * time.Second
	DefaultUnknownTopicTries  = 2
	// DefaultMaxRecordBytes is franz-go's own default of
	// kgo.ProducerBatchMaxBytes, which a zero MaxRecordBytes leaves in
	// place.
	DefaultMaxRecordBytes = 1000012
)

// Sentinel errors.
var (
	// ErrNilMessage is the per-message error (permanent) of a nil entry in
	// the batch given to Send.
	ErrNilMessage = errors.New("kafka sender: nil message")
	// ErrInvalidConfig is returned by New when the configuration is
	// unusable; the message names the field.
	ErrInvalidConfig = errors.New("kafka sender: invalid config")
	// ErrNoTopic is the per-message error (rejected) of a message whose
	// route has no Topic.
	ErrNoTopic = errors.New("kafka sender: route has no topic")
)

// Config configures a Kafka sender. The fields are plain values so the
// command line can fill them from YAML.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// ClientID is sent to the brokers to name this producer in their logs
	// and quotas. Defaults to "txbox".
	ClientID string
	// Linger is how long a partition waits for more records before it cuts
	// a produce request. The relay hands over a whole batch at once and
	// franz-go already packs whatever accumulates while a request is in
	// flight, so lingering only adds latency to every batch: with 5ms a
	// sequence of 200-message batches ran about 10× slower on kfake (see
	// docs/benchmarks/senders-kafka-rabbitmq.md). Raise it only for many
	// small concurrent batches. Defaults to 0 (no linger).
	Linger time.Duration
	// MaxBufferedRecords bounds the records buffered in the client; Send
	// blocks (bounded by its context) when it is reached, which bounds
	// memory during an outage. Defaults to 10000.
	MaxBufferedRecords int
	// DeliveryTimeout bounds how long a record may wait to be produced,
	// retries included. A record that times out fails as transient (the
	// cluster is unreachable or unhealthy), so an outage ends a Send after
	// about this long instead of hanging. Keep it well above a few metadata
	// round trips: a topic that does not exist is recognised (rejected)
	// only after UnknownTopicRetries metadata refreshes, and a record that
	// times out before that is reported as transient, which pauses the
	// sender instead of counting an attempt. Defaults to 10s.
	DeliveryTimeout time.Duration
	// DialTimeout bounds opening a connection to a broker. Defaults to 5s.
	DialTimeout time.Duration
	// UnknownTopicRetries is how many metadata refreshes a record waits for
	// a topic that the cluster reports as unknown before it fails as
	// rejected. Defaults to 2.
	UnknownTopicRetries int
	// MaxRecordBytes caps one produce batch (and therefore one record), the
	// client-side twin of the broker's max.message.bytes. A bigger record
	// fails at once as permanent (it can never be produced). Defaults to
	// DefaultMaxRecordBytes.
	MaxRecordBytes int
	// ProvisionPartitions is the partition count of the topics
	// [Sender.Provision] creates; 0 or -1 uses the broker's
	// num.partitions. Send does not use it.
	ProvisionPartitions int32
	// ProvisionReplicationFactor is the replication factor of the topics
	// Provision creates; 0 or -1 uses the broker's
	// default.replication.factor. Send does not use it.
	ProvisionReplicationFactor int16
	// TLS, when not nil, makes every broker connection TLS with this
	// configuration; an empty ServerName is set to each broker's host.
	// Defaults to plain TCP.
	TLS *tls.Config
	// SASL authenticates every connection with this mechanism
	// (franz-go's pkg/sasl/plain or pkg/sasl/scram). Defaults to none.
	SASL sasl.Mechanism
	// CloudEvents chooses the format of messages whose route sets none,
	// and the CloudEvents source and default datacontenttype
	// (docs/cloudevents.md). In the cloudevents format the attributes
	// travel as ce_ headers and the datacontenttype as content-type, as
	// the Kafka binding has them. A sender from NewFromClient has the
	// zero value (the txbox format, unless a route sets one). Defaults
	// to the txbox format.
	CloudEvents sender.CloudEvents
}

func (c Config) withDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.MaxBufferedRecords == 0 {
		c.MaxBufferedRecords = DefaultMaxBufferedRecords
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.UnknownTopicRetries == 0 {
		c.UnknownTopicRetries = DefaultUnknownTopicTries
	}
	return c
}

func (c Config) validate() error {
	if len(c.Brokers) == 0 {
		return fmt.Errorf("%w: brokers is empty", ErrInvalidConfig)
	}
	for i, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("%w: brokers[%d] %q is not host:port: %v", ErrInvalidConfig, i, b, err)
		}
	}
	switch {
	case c.Linger < 0:
		return fmt.Errorf("%w: linger must be ≥ 0, got %s", ErrInvalidConfig, c.Linger)
	case c.MaxBufferedRecords < 0:
		return fmt.Errorf("%w: max-buffered-records must be > 0, got %d", ErrInvalidConfig, c.MaxBufferedRecords)
	case c.DeliveryTimeout < 200*time.Millisecond:
		return fmt.Errorf("%w: delivery-timeout must be ≥ 200ms, got %s", ErrInvalidConfig, c.DeliveryTimeout)
	case c.DialTimeout < 0:
		return fmt.Errorf("%w: dial-timeout must be > 0, got %s", ErrInvalidConfig, c.DialTimeout)
	case c.UnknownTopicRetries < 0:
		return fmt.Errorf("%w: unknown-topic-retries must be > 0, got %d", ErrInvalidConfig, c.UnknownTopicRetries)
	case c.MaxRecordBytes != 0 && (c.MaxRecordBytes < 512 || c.MaxRecordBytes > 1<<30):
		return fmt.Errorf("%w: max-record-bytes must be in [512, 1GiB], got %d", ErrInvalidConfig, c.MaxRecordBytes)
	case c.ProvisionPartitions < -1:
		return fmt.Errorf("%w: provision-partitions must be ≥ 1 (or -1 for the broker's default), got %d", ErrInvalidConfig, c.ProvisionPartitions)
	case c.ProvisionReplicationFactor < -1:
		return fmt.Errorf("%w: provision-replication-factor must be ≥ 1 (or -1 for the broker's default), got %d", ErrInvalidConfig, c.ProvisionReplicationFactor)
	}
	return nil
}

// Options returns the franz-go options New uses for cfg (after defaults),
// so a caller can build its own client with the same producer guarantees
// and extra options (TLS, SASL) and pass it to [NewFromClient].
func (c Config) Options() ([]kgo.Opt, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(c.Linger),
		kgo.MaxBufferedRecords(c.MaxBufferedRecords),
		kgo.RecordDeliveryTimeout(c.DeliveryTimeout),
		kgo.DialTimeout(c.DialTimeout),
		kgo.UnknownTopicRetries(c.UnknownTopicRetries),
		// A produce request that gets no answer (a hung broker, a network
		// that drops packets) must not outlive the delivery timeout:
		// franz-go only fails records once the request is answered or its
		// connection times out, after the produce timeout plus this
		// overhead (10s + 10s by default). Half and half keeps the total
		// at DeliveryTimeout; a timed-out connection is closed and
		// redialed.
		kgo.ProduceRequestTimeout(c.DeliveryTimeout / 2),
		kgo.RequestTimeoutOverhead(c.DeliveryTimeout / 2),
		// Without this an idempotent producer refuses to fail a record
		// whose request was written but never answered, and a Send during
		// an outage would wait forever. The outbox is at-least-once
		// anyway: a record failed here is retried by the relay and a
		// duplicate is absorbed by the receiver's inbox.
		kgo.AllowIdempotentProduceCancellation(),
	}
	if c.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(c.MaxRecordBytes)))
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	return opts, nil
}

// Sender produces txbox messages to Kafka. It is safe for concurrent use.
type Sender struct {
	cl    *kgo.Client
	owned bool
	// pingTimeout bounds the check, after a batch failed as a whole,
	// that any broker answers at all.
	pingTimeout time.Duration
	// partitions and replicas are what Provision creates topics with.
	partitions int32
	replicas   int16
	ce         sender.CloudEvents

	// life admits Sends until Close, which waits for those in flight.
	life sender.Lifecycle
}

var (
	_ sender.Sender        = (*Sender)(nil)
	_ sender.Destinationer = (*Sender)(nil)
	_ sender.QuickAcker    = (*Sender)(nil)
	_ sender.Provisioner   = (*Sender)(nil)
)

// AcksQuickly implements [sender.QuickAcker]: Kafka acknowledges a batch
// within milliseconds, so the relay defaults this sender's event types to
// the lock claim where the store has one.
func (s *Sender) AcksQuickly() bool { return true }

// maxPingTimeout bounds the reachability check after a batch failed as a
// whole. A broker that is up answers a metadata request in milliseconds;
// the bound keeps a hung cluster from adding more than half a second to a Send
// that already waited DeliveryTimeout.
const maxPingTimeout = 500 * time.Millisecond

// Destination implements [sender.Destinationer]: the route's topic. A
// topic whose partitions have no leader, or that does not exist, fails
// alone; when no broker of the cluster answers at all, the failures are
// marked [sender.Disconnected] and pause every topic of the sender.
func (s *Sender) Destination(r sender.Route) string { return r.Topic }

// New returns a Sender with its own franz-go client built from cfg. It
// does not contact the cluster: an unreachable cluster shows up as
// transient Send errors, so the relay can start during an outage.
func New(cfg Config) (*Sender, error) {
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	ce, err := c.CloudEvents.Resolve("", false)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return &Sender{cl: cl, owned: true, pingTimeout: min(c.DialTimeout, maxPingTimeout),
		partitions: orDefault(c.ProvisionPartitions), replicas: int16(orDefault(int32(c.ProvisionReplicationFactor))),
		ce: ce}, nil
}

// orDefault maps an unset (0) topic setting to -1, Kafka's "broker
// default".
func orDefault(v int32) int32 {
	if v == 0 {
		return -1
	}
	return v
}

// NewFromClient wraps a client the caller built and owns; Close does not
// close it. The client should use acks=all (franz-go's default) with the
// idempotent producer (also the default) and a RecordDeliveryTimeout, or an
// outage makes Send wait until its context ends. [Config.Options] gives the
// options New uses.
func NewFromClient(cl *kgo.Client) *Sender {
	return &Sender{cl: cl, pingTimeout: maxPingTimeout, partitions: -1, replicas: -1}
}

// Client returns the underlying franz-go client.
func (s *Sender) Client() *kgo.Client { return s.cl }

// batch collects the promises of one Send.
type batch struct {
	mu      sync.Mutex
	errs    []error
	settled []bool
	left    int
	done    chan struct{}
}

func (b *batch) settle(i int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.settled[i] {
		return
	}
	b.settled[i] = true
	b.errs[i] = err
	b.left--
	if b.left == 0 {
		close(b.done)
	}
}

// Send produces every message, then waits once for all promises. It
// returns nil when every record was acked by all in-sync replicas, a
// *sender.BatchError when only some failed, and a single transient error
// when the whole batch failed for transient reasons (an outage).
func (s *Sender) Send(ctx context.Context, msgs []*sender.Message) error {
	return s.life.Send(ctx, "kafka sender", msgs, s.send)
}

// send is Send within the lifecycle, for a batch that is not empty.
func (s *Sender) send(ctx context.Context, msgs []*sender.Message) error {
	b := &batch{
		errs:    make([]error, len(msgs)),
		settled: make([]bool, len(msgs)),
		left:    len(msgs),
		done:    make(chan struct{}),
	}
	for i, m := range msgs {
		if m == nil {
			b.settle(i, txbox.Permanent(ErrNilMessage))
			continue
		}
		if m.Route.Topic == "" {
			b.settle(i, txbox.Rejected(fmt.Errorf("%w (event %s, type %q)", ErrNoTopic, m.ID, m.EventType)))
			continue
		}
		e, binary, err := s.ce.Binary(m)
		if err != nil {
			b.settle(i, txbox.Permanent(fmt.Errorf("kafka sender: event %s: %w", m.ID, err)))
			continue
		}
		r := record(m)
		if binary {
			addCloudEvent(r, &e)
		}
		i := i
		s.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			b.settle(i, classify(err))
		})
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		// Records already written cannot be recalled; report the ones
		// without an answer as failed so the relay retries them (the
		// receiver's inbox absorbs a duplicate).
		cause := txbox.Transient(fmt.Errorf("kafka sender: no ack before the context ended: %w", ctx.Err()))
		b.mu.Lock()
		for i := range b.errs {
			if !b.settled[i] {
				b.settled[i] = true
				b.errs[i] = cause
			}
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	errs := slices.Clone(b.errs)
	b.mu.Unlock()
	if ctx.Err() == nil && allTransient(errs) && !s.reachable() {
		// Not one broker answers: the connection to the cluster itself
		// is gone, not one topic or partition.
		for i, err := range errs {
			errs[i] = sender.Disconnected(err)
		}
	}
	return sender.Summarize(errs)
}

func allTransient(errs []error) bool {
	for _, err := range errs {
		if err == nil || txbox.Classify(err) != txbox.ClassTransient || errors.Is(err, txbox.ErrClosed) || errors.Is(err, kgo.ErrClientClosed) {
			return false
		}
	}
	return true
}

// reachable reports whether any broker answers a metadata request within
// pingTimeout (the dial timeout, at most 500ms). It runs only after a whole
// batch failed transiently,
// to tell a cluster that cannot be reached from a topic that cannot be
// produced to (a partition without a leader, too few in-sync replicas).
func (s *Sender) reachable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.pingTimeout)
	defer cancel()
	return s.cl.Ping(ctx) == nil
}

// Close stops new Sends (they fail with txbox.ErrClosed), waits for the
// Sends in flight and flushes what is buffered (bounded by ctx), then
// closes the client if New created it.
func (s *Sender) Close(ctx context.Context) error {
	if !s.life.Shut() {
		return nil
	}
	err := s.life.Wait(ctx)
	if err == nil {
		err = s.cl.Flush(ctx)
	}
	if s.owned {
		s.cl.Close()
	}
	if err != nil {
		return fmt.Errorf("kafka sender: close: %w", err)
	}
	return nil
}

// record builds the Kafka record of one message.
func record(m *sender.Message) *kgo.Record {
	key := m.Key
	if key == "" {
		key = m.ID.String()
	}
	r := &kgo.Record{
		Topic: m.Route.Topic,
		Key:   []byte(key),
		Value: m.Payload,
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+3)
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	m.MissingHeaders(func(k, v string) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	})
	return r
}

// ceHeaders are the binding's header names of the attributes.
var ceHeaders = sender.PrefixedNames(HeaderPrefixCloudEvents)

// Header names of the Kafka CloudEvents binding in binary content mode.
const (
	// HeaderPrefixCloudEvents prefixes each context attribute's name.
	HeaderPrefixCloudEvents = "ce_"
	// HeaderContentType carries the datacontenttype attribute.
	HeaderContentType = "content-type"
)

// addCloudEvent adds e's attributes to r as the binding's headers; an
// event's own Content-Type header, in any case, gives way to
// HeaderContentType. The record key stays the message key (or the event
// id), which the subject attribute repeats.
func addCloudEvent(r *kgo.Record, e *sender.CloudEvent) {
	r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return sender.IsContentType(h.Key) })
	e.Attributes(func(name, v string) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: ceHeaders[name], Value: []byte(v)})
	})
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(e.DataContentType)})
}

// classify sorts a produce error into the relay's classes.
func classify(err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("kafka sender: %w", err)
	var ke *kerr.Error
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		// The record can never be produced as it is: dead-letter it now,
		// with the reason, instead of after max attempts.
		return txbox.Permanent(fmt.Errorf("%w (the limits are the topic's max.message.bytes, the broker's message.max.bytes and the sender's max-record-bytes: docs/operations.md)", wrapped))
	case errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.CorruptMessage),
		errors.Is(err, kerr.InvalidTopicException),
		errors.Is(err, kerr.TopicAuthorizationFailed):
		return txbox.Rejected(wrapped)
	case errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.SaslAuthenticationFailed),
		errors.Is(err, kerr.UnsupportedSaslMechanism),
		errors.Is(err, kerr.IllegalSaslState):
		// The whole cluster refuses this producer (missing IDEMPOTENT_WRITE
		// ACL, bad credentials): no message can get through until an
		// operator fixes it, so pause rather than dead-letter the backlog.
		return txbox.Transient(wrapped)
	case errors.Is(err, kgo.ErrRecordTimeout),
		errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrMaxBuffered),
		errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return txbox.Transient(wrapped)
	case errors.As(err, &ke):
		if ke.Retriable {
			return txbox.Transient(wrapped)
		}
		return txbox.Rejected(wrapped)
	default:
		// Network errors and anything else franz-go gives up on are
		// failures to reach the cluster, not faults of the record.
		return txbox.Transient(wrapped)
	}
}
