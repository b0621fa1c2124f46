package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Provision implements [sender.Provisioner]: it declares every exchange
// of routes that does not exist, durable, of Config.ProvisionExchangeType
// (topic by default). An existing exchange is left as it is; one of
// another type is an error naming it. The default exchange and the amq.*
// exchanges always exist, and an exchange holding the "{event_type}"
// placeholder names no single exchange: both are skipped. Provision binds
// no queue: a message no queue is bound for is still returned as
// unroutable, and binding queues stays the consumers' business.
func (s *Sender) Provision(ctx context.Context, routes []sender.Route) error {
	var names []string
	for _, r := range routes {
		if r.Exchange != "" && !strings.HasPrefix(r.Exchange, "amq.") && !strings.Contains(r.Exchange, sender.PlaceholderEventType) {
			names = append(names, r.Exchange)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return errors.New("rabbitmq sender: provision: no route names an exchange to declare (the default exchange, amq.* and templates with {event_type} are skipped)")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rabbitmq sender: provision: %w", err)
	}
	conn, err := s.connection()
	if err != nil {
		return fmt.Errorf("rabbitmq sender: provision: %w", err)
	}
	for _, name := range names {
		if err := s.declare(ctx, conn, name); err != nil {
			return err
		}
	}
	return nil
}

// declare declares one exchange on a channel of its own: a refused
// declare closes the channel.
func (s *Sender) declare(ctx context.Context, conn *amqp.Connection, name string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq sender: provision exchange %q: open channel: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- ch.ExchangeDeclare(name, s.cfg.ProvisionExchangeType, true, false, false, false, nil) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = ch.Close()
		return fmt.Errorf("rabbitmq sender: provision exchange %q: %w", name, ctx.Err())
	}
	var ae *amqp.Error
	switch {
	case err == nil:
		_ = ch.Close()
		s.mu.Lock()
		delete(s.exchanges, name) // checked again before the first publish
		s.mu.Unlock()
		return nil
	case errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed:
		return fmt.Errorf("rabbitmq sender: provision exchange %q: it exists with other settings than a durable %s exchange (%s); leave provisioning off for it, or change provision-exchange-type", name, s.cfg.ProvisionExchangeType, ae.Reason)
	}
	_ = ch.Close()
	return fmt.Errorf("rabbitmq sender: provision exchange %q: %w", name, err)
}

func isMissingExchange(e *amqp.Error) bool {
	return e.Code == amqp.NotFound && strings.Contains(e.Reason, "exchange")
}

func (s *Sender) forgetExchanges() {
	s.mu.Lock()
	clear(s.exchanges)
	s.mu.Unlock()
}

// checkExchange makes sure the exchange exists before the first publish to
// it (and after ExchangeCheckTTL), on a throwaway channel, because a
// publish to a missing exchange closes the publishing channel and fails
// every message in flight on it.
func (s *Sender) checkExchange(ctx context.Context, name string) error {
	if name == "" || strings.HasPrefix(name, "amq.") {
		return nil // the default and the amq.* exchanges always exist
	}
	s.mu.Lock()
	at, ok := s.exchanges[name]
	s.mu.Unlock()
	if ok && time.Since(at) < s.cfg.ExchangeCheckTTL {
		return nil
	}
	return s.declarePassive(ctx, name)
}

// declarePassive asks the broker, on a throwaway channel, whether the
// exchange name exists, and remembers the answer for checkExchange.
func (s *Sender) declarePassive(ctx context.Context, name string) error {
	conn, ch, err := s.throwawayChannel(ctx)
	if err != nil {
		return err
	}
	err = ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil)
	if err == nil {
		_ = ch.Close()
		s.mu.Lock()
		s.exchanges[name] = time.Now()
		s.mu.Unlock()
		return nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return txbox.Rejected(fmt.Errorf("%w: %q", ErrNoExchange, name))
	}
	return connErr(conn, fmt.Errorf("%w: check exchange %q: %v", ErrConnection, name, err))
}

// CheckConnection implements [sender.ConnectionChecker]: it dials and
// authenticates (a wrong password is the broker's ACCESS_REFUSED), and
// opens and closes a channel, which the vhost's permissions must allow.
func (s *Sender) CheckConnection(ctx context.Context) error {
	_, ch, err := s.throwawayChannel(ctx)
	if err != nil {
		return err
	}
	_ = ch.Close()
	return nil
}

// throwawayChannel opens a channel of its own on the connection, dialing
// if needed: a refused check closes only it.
func (s *Sender) throwawayChannel(ctx context.Context) (*amqp.Connection, *amqp.Channel, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, txbox.Transient(fmt.Errorf("%w: %w", ErrConnection, err))
	}
	conn, err := s.connection()
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, connErr(conn, fmt.Errorf("%w: open channel: %v", ErrConnection, err))
	}
	return conn, ch, nil
}

// CheckRoute implements [sender.Checker]: it connects and authenticates
// (CheckConnection), then asks whether r's exchange exists; the amq.*
// exchanges are asked too (a vhost may lack one, or deny access to it),
// and the default exchange, which cannot be declared, always exists once
// connected. A queue bound to the exchange is not checked: an unroutable
// message is rejected when it is published.
func (s *Sender) CheckRoute(ctx context.Context, r sender.Route) error {
	if err := s.CheckConnection(ctx); err != nil {
		return err
	}
	if r.Exchange == "" {
		return nil
	}
	err := s.declarePassive(ctx, r.Exchange)
	if errors.Is(err, ErrNoExchange) {
		return fmt.Errorf("%w: %w", err, sender.ErrNoDestination)
	}
	return err
}
