package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/txbox/txbox/sender"
)

// Provision implements [sender.Provisioner]: it creates every topic of
// routes that does not exist, with Config.ProvisionPartitions partitions
// and Config.ProvisionReplicationFactor replicas (the broker's defaults
// unless set). Existing topics are left as they are. A topic holding the
// "{event_type}" placeholder names no single topic and is skipped.
func (s *Sender) Provision(ctx context.Context, routes []sender.Route) error {
	var topics []string
	for _, r := range routes {
		if r.Topic != "" && !strings.Contains(r.Topic, sender.PlaceholderEventType) {
			topics = append(topics, r.Topic)
		}
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	if len(topics) == 0 {
		return errors.New("kafka sender: provision: no route names a topic (topic templates with {event_type} cannot be created in advance)")
	}
	resp, err := kadm.NewClient(s.cl).CreateTopics(ctx, s.partitions, s.replicas, nil, topics...)
	if err != nil {
		return fmt.Errorf("kafka sender: provision topics %q: %w", topics, err)
	}
	var errs []error
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			msg := t.Err.Error()
			if t.ErrMessage != "" {
				msg += ": " + t.ErrMessage
			}
			errs = append(errs, fmt.Errorf("create topic %q: %s", t.Topic, msg))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafka sender: provision: %w", errors.Join(errs...))
	}
	return nil
}

// CheckConnection implements [sender.ConnectionChecker]: a broker
// answers a metadata request, after the SASL handshake when one is
// configured (a wrong password fails it).
func (s *Sender) CheckConnection(ctx context.Context) error {
	if _, err := kadm.NewClient(s.cl).BrokerMetadata(ctx); err != nil {
		return fmt.Errorf("kafka sender: connect: %w", err)
	}
	return nil
}

// CheckRoute implements [sender.Checker]: r's topic exists.
func (s *Sender) CheckRoute(ctx context.Context, r sender.Route) error {
	td, err := kadm.NewClient(s.cl).ListTopics(ctx, r.Topic)
	if err != nil {
		return fmt.Errorf("kafka sender: look up topic %q: %w", r.Topic, err)
	}
	d, ok := td[r.Topic]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("kafka sender: topic %q: %w", r.Topic, sender.ErrNoDestination)
	case d.Err != nil:
		return fmt.Errorf("kafka sender: look up topic %q: %w", r.Topic, d.Err)
	}
	return nil
}
