package walmsg

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"
)

// Version is the encoding this package writes.
const Version = 1

// headerSize is the fixed part of a message, before the type's length.
const headerSize = 1 + 16 + 8 + 8

// Event is one decoded message.
type Event struct {
	ID        [16]byte
	CreatedAt time.Time
	// NotBefore is zero when the event has none.
	NotBefore time.Time
	Type      string
	Key       string
	Headers   map[string]string
	Payload   []byte
}

// ErrMalformed matches every decoding error.
var ErrMalformed = errors.New("walmsg: malformed message")

// Append appends the encoding of ev to dst. headersJSON is the headers
// already encoded as a JSON object, or empty for none: the publisher
// encodes them once for either mode.
func Append(dst []byte, id [16]byte, createdAt, notBefore time.Time, eventType, key string, headersJSON, payload []byte) []byte {
	dst = append(dst, Version)
	dst = append(dst, id[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(micros(createdAt)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(micros(notBefore)))
	dst = appendField(dst, eventType)
	dst = appendField(dst, key)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(headersJSON)))
	dst = append(dst, headersJSON...)
	return append(dst, payload...)
}

func appendField(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// micros is t in microseconds since the epoch, 0 for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// Decode decodes one message. The payload aliases msg: the caller must not
// reuse msg's memory while the event is alive.
func Decode(msg []byte) (*Event, error) { return decode(msg, nil) }

// HeaderCache remembers the last headers a stream decoded: producers
// mostly send the same headers with every event, and copying a decoded
// map costs less than decoding its JSON again (BenchmarkDecodeHeaders;
// the WAL mode drain of docs/benchmarks.md, "WAL mode"). The zero value is ready; it is not
// safe for concurrent use.
type HeaderCache struct {
	raw []byte
	m   map[string]string
}

// Decode is Decode through the cache: an event whose headers are the
// same bytes as the previous headers decoded gets a copy of their map
// (each event owns its map, as with Decode).
func (c *HeaderCache) Decode(msg []byte) (*Event, error) { return decode(msg, c) }

// headers decodes raw, through c when not nil.
func (c *HeaderCache) headers(raw []byte) (map[string]string, error) {
	if c != nil && c.m != nil && bytes.Equal(raw, c.raw) {
		return maps.Clone(c.m), nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if c != nil && len(raw) <= maxCachedHeaders {
		c.raw, c.m = append(c.raw[:0], raw...), maps.Clone(m)
	}
	return m, nil
}

// maxCachedHeaders bounds the headers HeaderCache keeps (bytes of JSON):
// bigger ones are decoded each time rather than held.
const maxCachedHeaders = 4 << 10

func decode(msg []byte, c *HeaderCache) (*Event, error) {
	if len(msg) < headerSize+12 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the fixed part", ErrMalformed, len(msg))
	}
	if msg[0] != Version {
		return nil, fmt.Errorf("%w: version %d, this relay reads version %d (upgrade the relay before the producers)", ErrMalformed, msg[0], Version)
	}
	ev := &Event{}
	copy(ev.ID[:], msg[1:17])
	ev.CreatedAt = fromMicros(int64(binary.BigEndian.Uint64(msg[17:25])))
	ev.NotBefore = fromMicros(int64(binary.BigEndian.Uint64(msg[25:33])))
	rest := msg[headerSize:]
	var typ, key, headers []byte
	var err error
	if typ, rest, err = field(rest, "type"); err != nil {
		return nil, err
	}
	if key, rest, err = field(rest, "key"); err != nil {
		return nil, err
	}
	if headers, rest, err = field(rest, "headers"); err != nil {
		return nil, err
	}
	ev.Type, ev.Key, ev.Payload = string(typ), string(key), rest
	if len(headers) > 0 {
		if ev.Headers, err = c.headers(headers); err != nil {
			return nil, fmt.Errorf("%w: headers are not a JSON object of strings: %v", ErrMalformed, err)
		}
	}
	return ev, nil
}

func field(b []byte, name string) (value, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: truncated before the %s's length", ErrMalformed, name)
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: the %s's length %d runs past the message", ErrMalformed, name, n)
	}
	return b[:n], b[n:], nil
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}
