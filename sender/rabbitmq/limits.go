package rabbitmq

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// checkSize fails, permanent, a message whose body is larger than the
// broker accepts: no retry makes it fit, and publishing it would close the
// channel under its neighbours.
func (s *Sender) checkSize(m *sender.Message) error {
	if max := s.maxBody.Load(); max > 0 && int64(len(m.Payload)) > max {
		return txbox.Permanent(fmt.Errorf("%w: the body is %d bytes, the broker accepts %d (max_message_size in rabbitmq.conf, the sender's max-message-bytes: docs/operations.md) (event %s)",
			ErrTooLarge, len(m.Payload), max, m.ID))
	}
	return nil
}

// learnMaxBody lowers the known limit to n (n ≤ 0: no information).
func (s *Sender) learnMaxBody(n int64) {
	for {
		cur := s.maxBody.Load()
		if n <= 0 || (cur > 0 && cur <= n) || s.maxBody.CompareAndSwap(cur, n) {
			return
		}
	}
}

// defaultMaxBody is Config.MaxMessageBytes, else the default
// max_message_size of the broker's version: 128 MiB from 3.8 to 3.13,
// 16 MiB from 4.0, 0 (unknown) otherwise.
func (s *Sender) defaultMaxBody(conn *amqp.Connection) int64 {
	if s.cfg.MaxMessageBytes > 0 {
		return int64(s.cfg.MaxMessageBytes)
	}
	v, _ := conn.Properties["version"].(string)
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	switch {
	case err1 != nil || err2 != nil:
		return 0
	case ma >= 4:
		return 16 << 20
	case ma == 3 && mi >= 8:
		return 128 << 20
	}
	return 0
}

// tooLargeRe matches the reason of the channel close with which the broker
// refuses a message over max_message_size.
var tooLargeRe = regexp.MustCompile(`message size (\d+) is larger than configured max size (\d+)`)

// sizeRefusal returns the broker's max_message_size when e is its refusal
// of a too large message, else 0.
func sizeRefusal(e *amqp.Error) int64 {
	if e == nil || e.Code != amqp.PreconditionFailed {
		return 0
	}
	m := tooLargeRe.FindStringSubmatch(e.Reason)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[2], 10, 64)
	return n
}

// encodable checks the AMQP short-string limits a publish frame must meet.
func encodable(m *sender.Message) error {
	const max = 255
	bad := func(what string, n int) error {
		return txbox.Rejected(fmt.Errorf("%w: %s is %d bytes, AMQP allows %d (event %s)", ErrInvalidMessage, what, n, max, m.ID))
	}
	if n := len(m.Route.Exchange); n > max {
		return bad("exchange", n)
	}
	if n := len(routingKey(m)); n > max {
		return bad("routing key", n)
	}
	for k := range m.Headers {
		if len(k) > max {
			return bad("a header name", len(k))
		}
	}
	return nil
}
