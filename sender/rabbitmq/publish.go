package rabbitmq

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// publish publishes msgs[todo] on pc and fills errs with their outcomes:
// it watches for returns, publishes, waits for the confirms, then marks
// the returned messages.
func (s *Sender) publish(ctx context.Context, pc *pubChan, msgs []*sender.Message, todo []int, errs []error) {
	returned, forget := pc.watchReturns(msgs, todo)
	defer forget()
	dcs := s.publishAll(ctx, pc, msgs, todo, errs)
	s.awaitConfirms(ctx, pc, msgs, todo, dcs, errs)
	pc.sync()
	for _, i := range todo {
		if errs[i] == nil && returned[i].Load() {
			m := msgs[i]
			errs[i] = txbox.Rejected(fmt.Errorf("%w: no queue bound for exchange %q routing key %q (event %s)",
				ErrUnroutable, m.Route.Exchange, routingKey(m), m.ID))
		}
	}
}

// watchReturns registers msgs[todo] with pc's return listener: returned[i]
// is set when the broker returns msgs[i] as unroutable. forget
// unregisters them.
func (pc *pubChan) watchReturns(msgs []*sender.Message, todo []int) (returned []atomic.Bool, forget func()) {
	returned = make([]atomic.Bool, len(msgs))
	ids := make([]string, len(msgs))
	pc.rmu.Lock()
	for _, i := range todo {
		ids[i] = msgs[i].ID.String()
		pc.pending[ids[i]] = append(pc.pending[ids[i]], &returned[i])
	}
	pc.rmu.Unlock()
	return returned, func() {
		pc.rmu.Lock()
		for _, i := range todo {
			fs := slices.DeleteFunc(pc.pending[ids[i]], func(f *atomic.Bool) bool { return f == &returned[i] })
			if len(fs) == 0 {
				delete(pc.pending, ids[i])
			} else {
				pc.pending[ids[i]] = fs
			}
		}
		pc.rmu.Unlock()
	}
}

// publishAll publishes msgs[todo] on pc, under its publish lock, and
// returns their deferred confirms. After the first failed publish the
// rest are not published: their errs entries get the same error.
func (s *Sender) publishAll(ctx context.Context, pc *pubChan, msgs []*sender.Message, todo []int, errs []error) []*amqp.DeferredConfirmation {
	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	pc.pub.Lock()
	defer pc.pub.Unlock()
	var pubErr error
	for _, i := range todo {
		if pubErr == nil {
			m := msgs[i]
			var err error
			dcs[i], err = pc.ch.PublishWithDeferredConfirmWithContext(ctx,
				m.Route.Exchange, routingKey(m), true, false, s.publishing(m))
			if err != nil {
				pubErr = s.publishFailed(ctx, pc, err)
			}
		}
		if pubErr != nil {
			errs[i] = pubErr
			if max := sizeRefusal(pc.closeErr.Load()); max > 0 && int64(len(msgs[i].Payload)) > max {
				// The message the broker refused (its write may have
				// been cut by the close).
				errs[i] = s.checkSize(msgs[i])
			}
		}
	}
	return dcs
}

// awaitConfirms waits, within ConfirmTimeout and ctx, for the confirm of
// each published message and records a nack or a lost channel in errs.
func (s *Sender) awaitConfirms(ctx context.Context, pc *pubChan, msgs []*sender.Message, todo []int, dcs []*amqp.DeferredConfirmation, errs []error) {
	timer := time.NewTimer(s.cfg.ConfirmTimeout)
	defer timer.Stop()
	var waitErr error
	for _, i := range todo {
		dc := dcs[i]
		if dc == nil {
			continue
		}
		if waitErr == nil {
			select {
			case <-dc.Done():
			case <-ctx.Done():
				waitErr = fmt.Errorf("%w: no confirm before the context ended: %w", ErrConnection, ctx.Err())
			case <-timer.C:
				waitErr = fmt.Errorf("%w: no confirm within %s", ErrConnection, s.cfg.ConfirmTimeout)
			}
		}
		if waitErr != nil {
			errs[i] = txbox.Transient(waitErr)
			continue
		}
		if !dc.Acked() {
			if pc.ch.IsClosed() {
				// The client nacks everything outstanding when the
				// channel closes; that is a loss, not a refusal, unless
				// the channel closed because the exchange is gone.
				errs[i] = s.channelLost(pc, msgs[i])
			} else {
				errs[i] = txbox.Rejected(fmt.Errorf("%w (event %s)", ErrNacked, msgs[i].ID))
			}
		}
	}
}

// publishFailed classifies a failed publish: the context ended, or the
// channel or connection is gone (every later publish on it fails too).
func (s *Sender) publishFailed(ctx context.Context, pc *pubChan, err error) error {
	if ctx.Err() != nil {
		return txbox.Transient(fmt.Errorf("%w: publish: %w", ErrConnection, ctx.Err()))
	}
	if pc.ch.IsClosed() {
		e := pc.closeError()
		if e != nil && isMissingExchange(e) {
			s.forgetExchanges()
		}
		s.learnMaxBody(sizeRefusal(e))
	}
	return connErr(pc.conn, fmt.Errorf("%w: publish: %v", ErrConnection, err))
}

func (s *Sender) channelLost(pc *pubChan, m *sender.Message) error {
	e := pc.closeError()
	if max := sizeRefusal(e); max > 0 {
		// The broker refused a message over its max_message_size and
		// closed the channel: that message fails permanent, the others
		// in flight with it are collateral (transient), and later
		// batches are checked against the figure before publishing.
		s.learnMaxBody(max)
		if err := s.checkSize(m); err != nil {
			return err
		}
	}
	if e != nil && isMissingExchange(e) {
		s.forgetExchanges()
		if m.Route.Exchange != "" && strings.Contains(e.Reason, "'"+m.Route.Exchange+"'") {
			return txbox.Rejected(fmt.Errorf("%w: %q (event %s)", ErrNoExchange, m.Route.Exchange, m.ID))
		}
	}
	reason := "channel closed"
	if e != nil {
		reason = fmt.Sprintf("channel closed: %d %s", e.Code, e.Reason)
	}
	return connErr(pc.conn, fmt.Errorf("%w: %s before the confirm of event %s", ErrConnection, reason, m.ID))
}

func routingKey(m *sender.Message) string {
	if m.Route.RoutingKey != "" {
		return m.Route.RoutingKey
	}
	return m.EventType
}

// HeaderPrefixCloudEvents prefixes each CloudEvents context attribute's
// name in the headers of a message in the cloudevents format: the AMQP
// 1.0 binding's application-property prefix, the closest convention AMQP
// 0-9-1 has (docs/cloudevents.md). Values are the attributes' canonical
// strings (time as RFC 3339: an AMQP 0-9-1 timestamp has whole seconds);
// the datacontenttype is the content-type property.
const HeaderPrefixCloudEvents = "cloudEvents:"

// ceHeaders are the header names of the attributes.
var ceHeaders = sender.PrefixedNames(HeaderPrefixCloudEvents)

// publishing builds the AMQP message of m in its format. The send loop
// checked the format (CloudEvents.Binary).
func (s *Sender) publishing(m *sender.Message) amqp.Publishing {
	h := make(amqp.Table, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	m.MissingHeaders(func(k, v string) { h[k] = v })
	if _, ok := h[sender.HeaderKey]; !ok && m.Key != "" {
		h[sender.HeaderKey] = m.Key
	}
	p := amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID.String(),
		Type:         m.EventType,
		Timestamp:    m.CreatedAt,
		AppId:        "txbox",
		Body:         m.Payload,
	}
	if e, binary, _ := s.cfg.CloudEvents.Binary(m); binary {
		for k := range h {
			if sender.IsContentType(k) {
				delete(h, k)
			}
		}
		e.Attributes(func(name, v string) { h[ceHeaders[name]] = v })
		p.ContentType = e.DataContentType
	}
	return p
}
