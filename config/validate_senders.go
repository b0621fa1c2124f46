package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// senderCheck reports the problems of one sender's keys under path p.
type senderCheck struct {
	d *decoder
	p string
}

func (c senderCheck) fail(key, format string, args ...any) {
	c.d.fail(join(c.p, key), nil, format, args...)
}

func (c senderCheck) required(key string, missing bool) {
	if missing {
		c.fail(key, "required")
	}
}

func (c senderCheck) positive(key string, v time.Duration) {
	if v <= 0 {
		c.fail(key, "must be > 0")
	}
}

func (c senderCheck) notNegative(key string, v int64) {
	if v < 0 {
		c.fail(key, "must be ≥ 0")
	}
}

// each reports the items of the list key that bad rejects, by index.
func (c senderCheck) each(key string, items []string, bad func(string) string) {
	for i, it := range items {
		if msg := bad(it); msg != "" {
			c.d.fail(fmt.Sprintf("%s[%d]", join(c.p, key), i), nil, msg, clip(it))
		}
	}
}

// isSet reports whether the file, the environment or a flag set key:
// keys with a default are never empty.
func (c senderCheck) isSet(key string) bool {
	p := join(c.p, key)
	_, inFile := c.d.lines[p]
	_, overridden := c.d.sources[p]
	return inFile || overridden
}

// onlyWithProvision reports provision-* keys set on a sender whose
// provisioning is off: they would do nothing, which is likely not what the
// file meant.
func (c senderCheck) onlyWithProvision(on bool, set map[string]bool) {
	if on {
		return
	}
	keys := make([]string, 0, len(set))
	for k, v := range set {
		if v {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.fail(k, "only used with provision: true")
	}
}

// validateSender checks one sender's name and the keys of its type.
func validateSender(d *decoder, p, name string, s *Sender) {
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if !(ch == '_' || ch == '-' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) || len(name) > 64 {
			d.fail(p, nil, "sender names use [A-Za-z0-9_-], at most 64 characters")
			return
		}
	}
	if s == nil || s.Type == "" {
		d.fail(join(p, "type"), nil, "required: one of %s", strings.Join(SenderTypes(), ", "))
		return
	}
	c := senderCheck{d: d, p: p}
	ce := s.senderCloudEvents()
	checkFormat(d, join(p, "format"), string(ce.Format), s.Type)
	if f := s.format(); f != nil && f.CloudEvents != nil {
		_, err := sender.CloudEvents{Source: ce.Source, DataContentType: ce.DataContentType}.Resolve("", true)
		var cerr *txbox.ConfigError
		if errors.As(err, &cerr) {
			c.sub("cloudevents").fail(cerr.Field, "%s", cerr.Reason)
		}
	}
	switch s.Type {
	case SenderNATS:
		c.nats(s.NATS)
	case SenderWebhook:
		c.webhook(s.Webhook)
	case SenderKafka:
		c.kafka(s.Kafka)
	case SenderRabbitMQ:
		c.rabbitmq(s.RabbitMQ)
	case SenderRedis:
		c.redis(s.Redis)
	}
}

func (c senderCheck) nats(n *NATSSender) {
	c.required("url", n.URL == "")
	c.positive("timeout", n.Timeout)
	c.notNegative("max-pending", int64(n.MaxPending))
	c.onlyWithProvision(n.Provision, map[string]bool{"provision-stream": c.isSet("provision-stream"), "provision-subjects": len(n.ProvisionSubjects) > 0})
	if n.ProvisionStream != "" && strings.ContainsAny(n.ProvisionStream, " \t.*>/\\") {
		c.fail("provision-stream", "%q is not a JetStream stream name (no spaces, '.', '*', '>', '/' or '\\')", clip(n.ProvisionStream))
	}
	c.secret("password", n.PasswordEnv, n.PasswordFile, false)
	c.secret("token", n.TokenEnv, n.TokenFile, false)
	hasPW := n.PasswordEnv != "" || n.PasswordFile != ""
	if hasPW != (n.User != "") {
		c.fail("user", "user and password-env/password-file go together")
	}
	var methods []string
	for _, m := range []struct {
		key string
		on  bool
	}{{"user", n.User != "" || hasPW}, {"token-env", n.TokenEnv != "" || n.TokenFile != ""}, {"nkey-seed-file", n.NKeySeedFile != ""}, {"creds-file", n.CredsFile != ""}} {
		if m.on {
			methods = append(methods, m.key)
		}
	}
	if len(methods) > 1 {
		c.fail(methods[1], "NATS takes one way to authenticate: %s", strings.Join(methods, " or "))
	}
	n.TLS.check(c.sub("tls"))
	c.each("provision-subjects", n.ProvisionSubjects, func(subj string) string {
		if subj == "" || strings.ContainsAny(subj, " \t") || strings.Contains(subj, "..") || strings.HasPrefix(subj, ".") || strings.HasSuffix(subj, ".") {
			return "%q is not a NATS subject"
		}
		return ""
	})
}

func (c senderCheck) webhook(w *WebhookSender) {
	if w.URL != "" && !isHTTPURL(w.URL) {
		c.fail("url", "must be an http:// or https:// URL")
	}
	c.positive("timeout", w.Timeout)
	c.secret("hmac-secret", w.HMACSecretEnv, w.HMACSecretFile, false)
	w.TLS.check(c.sub("tls"))
	c.notNegative("concurrency", int64(w.Concurrency))
	for _, code := range w.PermanentStatus {
		// The same rule as webhook.New's, checked here so that config
		// check names the key in the file.
		switch {
		case code == 408 || code == 429:
			c.fail("permanent-status", "%d says the receiver is overloaded, not that the message is wrong: it stays transient", code)
		case code < 400 || code > 499:
			c.fail("permanent-status", "%d is not a 4xx status code (5xx stay transient: the relay judges them by destination)", code)
		}
	}
}

func (c senderCheck) kafka(k *KafkaSender) {
	if len(k.Brokers) == 0 {
		c.fail("brokers", "required: at least one host:port")
	}
	c.each("brokers", k.Brokers, func(b string) string {
		if !strings.Contains(b, ":") {
			return "must be host:port, not %q"
		}
		return ""
	})
	c.positive("timeout", k.Timeout)
	c.notNegative("max-buffered-records", int64(k.MaxBufferedRecords))
	if k.MaxRecordBytes != 0 && (k.MaxRecordBytes < 512 || k.MaxRecordBytes > 1<<30) {
		c.fail("max-record-bytes", "must be in 512..1073741824, got %d", k.MaxRecordBytes)
	}
	c.onlyWithProvision(k.Provision, map[string]bool{"provision-topics": len(k.ProvisionTopics) > 0,
		"provision-partitions": k.ProvisionPartitions != 0, "provision-replication-factor": k.ProvisionReplicationFactor != 0})
	if k.ProvisionPartitions < -1 || k.ProvisionPartitions > 1_000_000 {
		c.fail("provision-partitions", "must be ≥ 1, or -1 for the broker's default, got %d", k.ProvisionPartitions)
	}
	if k.ProvisionReplicationFactor < -1 || k.ProvisionReplicationFactor > 32767 {
		c.fail("provision-replication-factor", "must be ≥ 1, or -1 for the broker's default, got %d", k.ProvisionReplicationFactor)
	}
	c.each("provision-topics", k.ProvisionTopics, oneName("topic"))
	k.TLS.check(c.sub("tls"))
	k.SASL.check(c.sub("sasl"))
}

// oneName rejects an empty name and a template, which names no single
// topic or exchange.
func oneName(what string) func(string) string {
	return func(s string) string {
		if s == "" || strings.Contains(s, sender.PlaceholderEventType) {
			return "must name one " + what + ", not %q"
		}
		return ""
	}
}

func (c senderCheck) rabbitmq(r *RabbitMQSender) {
	c.required("url", r.URL == "")
	c.positive("timeout", r.Timeout)
	c.notNegative("channels", int64(r.Channels))
	c.notNegative("max-message-bytes", int64(r.MaxMessageBytes))
	c.onlyWithProvision(r.Provision, map[string]bool{"provision-exchanges": len(r.ProvisionExchanges) > 0, "provision-exchange-type": c.isSet("provision-exchange-type")})
	switch t := r.ProvisionExchangeType; {
	case t == "", t == "direct", t == "fanout", t == "topic", t == "headers", strings.HasPrefix(t, "x-") && len(t) > 2:
	default:
		c.fail("provision-exchange-type", "must be direct, fanout, topic, headers or x-*, not %q", clip(t))
	}
	c.each("provision-exchanges", r.ProvisionExchanges, oneName("exchange"))
	c.secret("password", r.PasswordEnv, r.PasswordFile, false)
	scheme, _, _ := strings.Cut(r.URL.Reveal(), "://")
	if r.TLS.on() && !strings.EqualFold(scheme, "amqps") {
		c.fail("tls", "needs an amqps:// url (TLS is chosen by the URL's scheme)")
	}
	if (r.PasswordEnv != "" || r.PasswordFile != "") && len(r.URL.Secrets()) > 0 {
		c.fail("password-env", "the url carries a password already: remove it from the url")
	}
	r.TLS.check(c.sub("tls"))
}

func (c senderCheck) redis(r *RedisSender) {
	c.required("addr", r.Addr == "")
	c.notNegative("db", int64(r.DB))
	c.notNegative("max-len", r.MaxLen)
	c.notNegative("pool-size", int64(r.PoolSize))
	c.positive("timeout", r.Timeout)
	c.secret("password", r.PasswordEnv, r.PasswordFile, false)
	r.TLS.check(c.sub("tls"))
}

// checkFormat checks a format key: a known format, and structured mode
// only for a webhook sender.
func checkFormat(d *decoder, path, format, senderType string) {
	f, err := sender.ParseFormat(format)
	switch {
	case err != nil:
		d.fail(path, nil, "%v", err)
	case f == sender.FormatCloudEventsStructured && senderType != SenderWebhook:
		d.fail(path, nil, "%s is for webhook senders, not %s: use %s", f, senderType, sender.FormatCloudEvents)
	}
}
