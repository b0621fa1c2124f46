package store_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox/store"
)

// realErrors are error texts captured from txbox's own senders, as the
// relay stores them as last_error: a throwaway program (kept out of the
// repository) sent one message through each sender and printed
// err.Error() of that message's entry in sender.Results. Where the
// program ran twice, or sent two messages that differ only in a value,
// both texts are here (a and b); the variable parts differ between them
// for real (ports of httptest servers, event ids, sizes, names).
//
// Services: NATS 2 with JetStream at 127.0.0.1:4222, RabbitMQ at
// amqp://guest:guest@127.0.0.1:5672/, Redis at 127.0.0.1:6379, Kafka as
// franz-go's kfake with one broker and the topic "orders" (as the
// sender/kafka tests start it), webhooks against an httptest server.
var realErrors = []struct {
	name, a, b, want string
}{
	// sender/webhook, a receiver answering 422 with an RFC 9457 problem
	// body {"title":"Unprocessable Entity","detail":"order 1234 unknown"}
	// (the sender puts title and detail in the text), for order 1234 and
	// order 98 in two runs with different ports.
	{"webhook 422 problem",
		"webhook: POST http://127.0.0.1:33319/problem: 422 Unprocessable Entity: Unprocessable Entity: order 1234 unknown",
		"webhook: POST http://127.0.0.1:44973/problem: 422 Unprocessable Entity: Unprocessable Entity: order 98 unknown",
		"webhook: POST http://<addr>/problem: 422 Unprocessable Entity: Unprocessable Entity: order <n> unknown"},
	// sender/webhook, 409 with a problem body: a one-word reason phrase
	// followed by the detail (TestFailureGroupsEndToEnd's receiver).
	{"webhook 409 problem",
		"webhook: POST http://127.0.0.1:38189/events: 409 Conflict: refused: conflict: item 32 at 2026-12-07T04:59:32.457656173Z",
		"webhook: POST http://127.0.0.1:43431/events: 409 Conflict: refused: conflict: item 7 at 2026-12-07T05:01:02.9548Z",
		"webhook: POST http://<addr>/events: 409 Conflict: refused: conflict: item <n> at <time>"},
	// sender/webhook, 422 with a plain application/json body
	// {"error":"order 1234 unknown"}: the sender keeps only problem
	// bodies, so the text ends at the status.
	{"webhook 422 json",
		"webhook: POST http://127.0.0.1:33319/json422: 422 Unprocessable Entity",
		"webhook: POST http://127.0.0.1:44973/json422: 422 Unprocessable Entity",
		"webhook: POST http://<addr>/json422: 422 Unprocessable Entity"},
	// sender/webhook, 400 with an empty body.
	{"webhook 400",
		"webhook: POST http://127.0.0.1:33319/bad: 400 Bad Request",
		"webhook: POST http://127.0.0.1:44973/bad: 400 Bad Request",
		"webhook: POST http://<addr>/bad: 400 Bad Request"},
	// sender/webhook, 404 from http.NotFound.
	{"webhook 404",
		"webhook: POST http://127.0.0.1:33319/missing: 404 Not Found",
		"webhook: POST http://127.0.0.1:44973/missing: 404 Not Found",
		"webhook: POST http://<addr>/missing: 404 Not Found"},
	// sender/webhook, 500 with a text/html body (not kept by the sender).
	{"webhook 500 html",
		"webhook: POST http://127.0.0.1:33319/html500: 500 Internal Server Error",
		"webhook: POST http://127.0.0.1:44973/html500: 500 Internal Server Error",
		"webhook: POST http://<addr>/html500: 500 Internal Server Error"},
	// sender/webhook, 503 with Retry-After: 30.
	{"webhook 503",
		"webhook: POST http://127.0.0.1:33319/busy: 503 Service Unavailable",
		"webhook: POST http://127.0.0.1:44973/busy: 503 Service Unavailable",
		"webhook: POST http://<addr>/busy: 503 Service Unavailable"},
	// sender/webhook, 413 (permanent): the sender adds the body's size.
	{"webhook 413",
		"webhook: POST http://127.0.0.1:33319/big: 413 Request Entity Too Large (the body was 14 bytes)",
		"webhook: POST http://127.0.0.1:44973/big: 413 Request Entity Too Large (the body was 2048 bytes)",
		"webhook: POST http://<addr>/big: 413 Request Entity Too Large (the body was <n> bytes)"},
	// sender/webhook to a port that was listened on and closed (the
	// route's ?token= query is not in the text: the sender redacts it).
	{"webhook connection refused",
		"webhook: POST http://127.0.0.1:45133/hooks/orders: dial tcp 127.0.0.1:45133: connect: connection refused",
		"webhook: POST http://127.0.0.1:34401/hooks/orders: dial tcp 127.0.0.1:34401: connect: connection refused",
		"webhook: POST http://<addr>/hooks/orders: dial tcp <addr>: connect: connection refused"},
	// sender/webhook to http://no-such-host.invalid/hook.
	{"webhook no such host",
		"webhook: POST http://no-such-host.invalid/hook: dial tcp: lookup no-such-host.invalid on 10.255.255.53:53: no such host",
		"",
		"webhook: POST http://no-such-host.invalid/hook: dial tcp: lookup no-such-host.invalid on <addr>: no such host"},
	// sender/nats, a subject no stream listens on (a random suffix per
	// run, and billing.invoice-paid).
	{"nats no stream",
		`nats: subject "fp.nostream.a01a24e59": nats: no stream bound to the subject: nats: no response from stream`,
		`nats: subject "billing.invoice-paid": nats: no stream bound to the subject: nats: no response from stream`,
		"nats: subject <q>: nats: no stream bound to the subject: nats: no response from stream"},
	// sender/nats, a payload of 2 MiB and of 3 MiB + 17 bytes over the
	// server's max_payload (1 MiB); the text is longer than the cap.
	{"nats max payload",
		`nats: subject "fp.big": nats: maximum payload exceeded: the message is 2097269 bytes (payload 2097152 + headers 117), the server's max_payload is 1048576 bytes (raise max_payload in the NATS server configuration, or lower the publish limit: docs/operations.md)`,
		`nats: subject "fp.big": nats: maximum payload exceeded: the message is 3145862 bytes (payload 3145745 + headers 117), the server's max_payload is 1048576 bytes (raise max_payload in the NATS server configuration, or lower the publish limit: docs/operations.md)`,
		"nats: subject <q>: nats: maximum payload exceeded: the message is <n> bytes (payload <n> + headers <n>), the server's max_payload is <n> bytes (raise max_payload in the NATS server configuration, or l"},
	// sender/kafka on kfake, topic no-such-topic.
	{"kafka unknown topic",
		"kafka sender: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.",
		"",
		"kafka sender: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition."},
	// sender/kafka on kfake, records of 2 MiB and 1 MiB + 5 bytes over
	// the sender's max-record-bytes.
	{"kafka record too large",
		"kafka sender: MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept (uncompressed_bytes=2097313) (the limits are the topic's max.message.bytes, the broker's message.max.bytes and the sender's max-record-bytes: docs/operations.md)",
		"kafka sender: MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept (uncompressed_bytes=1048742) (the limits are the topic's max.message.bytes, the broker's message.max.bytes and the sender's max-record-bytes: docs/operations.md)",
		"kafka sender: MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept (uncompressed_bytes=<n>) (the limits are the topic's max.message.bytes, the brok"},
	// sender/kafka with a closed port as its only broker, delivery
	// timeout 3s.
	{"kafka broker down",
		"kafka sender: records have timed out before they were able to be produced, last err: unable to dial: dial tcp 127.0.0.1:36789: connect: connection refused",
		"kafka sender: records have timed out before they were able to be produced, last err: unable to dial: dial tcp 127.0.0.1:45609: connect: connection refused",
		"kafka sender: records have timed out before they were able to be produced, last err: unable to dial: dial tcp <addr>: connect: connection refused"},
	// sender/rabbitmq, an exchange that does not exist (a random name
	// per run).
	{"rabbitmq no exchange",
		`rabbitmq sender: exchange does not exist: "fp-missing-01a24e59"`,
		`rabbitmq sender: exchange does not exist: "fp-missing-01a24e5b"`,
		"rabbitmq sender: exchange does not exist: <q>"},
	// sender/rabbitmq, amq.direct with a routing key no queue is bound to
	// (the broker returns the mandatory message).
	{"rabbitmq unroutable",
		`rabbitmq sender: message returned as unroutable: no queue bound for exchange "amq.direct" routing key "fp-nobody-bound" (event 01a24e59-1187-7eb0-85c0-9317f7500645)`,
		`rabbitmq sender: message returned as unroutable: no queue bound for exchange "amq.direct" routing key "fp-nobody-bound" (event 01a24e5b-17f5-714d-812e-b4a327e7c893)`,
		"rabbitmq sender: message returned as unroutable: no queue bound for exchange <q> routing key <q> (event <uuid>)"},
	// sender/rabbitmq, bodies of 200 MiB and 129 MiB over the broker's
	// max_message_size (128 MiB).
	{"rabbitmq too large",
		"rabbitmq sender: message larger than the broker's max_message_size: the body is 209715200 bytes, the broker accepts 134217728 (max_message_size in rabbitmq.conf, the sender's max-message-bytes: docs/operations.md) (event 01a24e59-118d-7d73-9ea4-08b48c7f11bd)",
		"rabbitmq sender: message larger than the broker's max_message_size: the body is 135266304 bytes, the broker accepts 134217728 (max_message_size in rabbitmq.conf, the sender's max-message-bytes: docs/operations.md) (event 01a24e5b-182b-7016-906b-eb3bdd9514b0)",
		"rabbitmq sender: message larger than the broker's max_message_size: the body is <n> bytes, the broker accepts <n> (max_message_size in rabbitmq.conf, the sender's max-message-bytes: docs/operations.md"},
	// amqp091-go directly (a custom sender would report this): publish
	// to a missing exchange, then the next call on the closed channel.
	{"amqp channel 404",
		`Exception (404) Reason: "NOT_FOUND - no exchange 'fp-raw-missing' in vhost '/'"`,
		`Exception (404) Reason: "NOT_FOUND - no exchange 'fp-raw-missing-01a24e5b' in vhost '/'"`,
		`Exception (404) Reason: "NOT_FOUND - no exchange <q> in vhost <q>"`},
	// amqp091-go directly: redeclare a direct exchange as topic.
	{"amqp channel 406",
		`Exception (406) Reason: "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'fp-typed' in vhost '/': received 'topic' but current is 'direct'"`,
		"",
		`Exception (406) Reason: "PRECONDITION_FAILED - inequivalent arg <q> for exchange <q> in vhost <q>: received <q> but current is <q>"`},
	// sender/redisstream, XADD to a key holding a string.
	{"redis wrongtype",
		"redisstream sender: WRONGTYPE Operation against a key holding the wrong kind of value",
		"",
		"redisstream sender: WRONGTYPE Operation against a key holding the wrong kind of value"},
	// sender/redisstream, a route with no stream.
	{"redis no stream",
		`redisstream sender: route has no stream (event 01a24e58-f9ea-7a44-86f1-f7045c1e16b5, type "order-created")`,
		`redisstream sender: route has no stream (event 01a24e5a-b26e-74ce-9be6-cb85af4b2215, type "order-created")`,
		"redisstream sender: route has no stream (event <uuid>, type <q>)"},
	// sender/redisstream at a closed port.
	{"redis down",
		"redisstream sender: redis unavailable: dial tcp 127.0.0.1:34999: connect: connection refused",
		"redisstream sender: redis unavailable: dial tcp 127.0.0.1:40331: connect: connection refused",
		"redisstream sender: redis unavailable: dial tcp <addr>: connect: connection refused"},
}

// TestNormalizeErrorRealTexts checks the group of every captured text,
// and that two instances of one failure fall in the same group.
func TestNormalizeErrorRealTexts(t *testing.T) {
	t.Parallel()
	for _, c := range realErrors {
		for _, in := range []string{c.a, c.b} {
			if in == "" {
				continue
			}
			if got := store.NormalizeError(in); got != c.want {
				t.Errorf("%s: NormalizeError(%q)\n got %q\nwant %q", c.name, in, got, c.want)
			}
		}
	}
}

// TestNormalizeErrorKeepsFailuresApart checks that no two of the
// captured failures share a group: each means something else (HTTP 422
// and 500, a missing exchange and a precondition, WRONGTYPE and no
// response from a stream).
func TestNormalizeErrorKeepsFailuresApart(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, c := range realErrors {
		got := store.NormalizeError(c.a)
		if other, ok := seen[got]; ok {
			t.Errorf("%s and %s share the group %q", other, c.name, got)
		}
		seen[got] = c.name
	}
	for _, p := range [][2]string{
		{"HTTP 422: order 1234 unknown", "HTTP 500: order 1234 unknown"},
		{"status 422", "status 500"},
		{"status code: 404", "status code: 409"},
		{"statusCode=429", "statusCode=503"},
		{"HTTP/1.1 502 Bad Gateway", "HTTP/1.1 504 Gateway Timeout"},
		{"unexpected response 400 Bad Request", "unexpected response 401 Unauthorized"},
		{"exit code 137", "exit code 143"},
	} {
		if a, b := store.NormalizeError(p[0]), store.NormalizeError(p[1]); a == b {
			t.Errorf("%q and %q share the group %q", p[0], p[1], a)
		}
	}
}

// TestNormalizeErrorRules shows each rule on a small text.
func TestNormalizeErrorRules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"HTTP 422: order 1234 unknown", "HTTP 422: order <n> unknown"},
		{"HTTP 422: order 98 unknown", "HTTP 422: order <n> unknown"},
		{"order 1234 unknown: 422", "order <n> unknown: <n>"},
		{"limit 4.5 exceeded, -12 left", "limit <n> exceeded, -<n> left"},
		{"event 01a24e59-1187-7eb0-85c0-9317f7500645 failed", "event <uuid> failed"},
		{"at 2026-12-07T02:33:04.123456Z", "at <time>"},
		{"at 2026-12-07T02:33:04+01:00, 2026-12-07 02:33:04 +0000 UTC", "at <time>, <time>"},
		{"2026/12/07 02:33:04 pool: dial", "<time> pool: dial"},
		{"on 2026-12-07 at 02:33:04.5", "on <time> at <time>"},
		{"Date: Mon, 07 Dec 2026 02:33:04 GMT", "Date: Mon, <n> Dec <n> <time>"},
		{"timeout after 1.5s (250ms, 1m30s, 3µs)", "timeout after <dur> (<dur>, <dur>, <dur>)"},
		{"dial tcp 10.0.0.7:9092", "dial tcp <addr>"},
		{"dial tcp [::1]:4222, fe80::1%eth0 and 2001:db8:0:0:0:0:0:1", "dial tcp <addr>, <addr>%eth0 and <addr>"},
		{"dial tcp kafka-1.example.com:9092 and localhost:8080", "dial tcp <addr> and <addr>"},
		{"GET https://api.example.com/orders/1234", "GET https://api.example.com/orders/<n>"},
		{"lookup kafka-3: no such host, kafka-3:9092", "lookup kafka-<n>: no such host, kafka-<n>:<n>"},
		{"crc 0x1f2e3d4c, offset 0XFF", "crc <hex>, offset <hex>"},
		{"trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7", "trace <hex> span <hex>"},
		{"deadbeef and 12345678 and ab12", "deadbeef and <n> and ab12"},
		{"v2, sha256, utf8, 4xx, 3rd, order_1234, order-1234", "v2, sha256, utf8, 4xx, 3rd, order_<n>, order-<n>"},
		{`key "order-42" and 'x-1' and ` + "`tbl`" + ` and ""`, "key <q> and <q> and <q> and <q>"},
		{`reason "no such queue" and 'a b'`, `reason "no such queue" and 'a b'`},
		{`body {"error":"order 12 unknown","id":"a7"}`, `body {<q>:"order <n> unknown",<q>:<q>}`},
		{`nats: subject \"fp.x\" in "outer text \"orders.9\" here"`, `nats: subject <q> in "outer text <q> here"`},
		{"the broker's limit, it's 'it' ", "the broker's limit, it's <q>"},
		{"  many\t\tspaces\r\n and\x00controls  ", "many spaces and controls"},
		{"HTTP/1.1 500 Internal Server Error", "HTTP/1.1 500 Internal Server Error"},
		{"HTTP/2 429 after 2 tries", "HTTP/2 429 after <n> tries"},
		{"Exception (504) Reason: channel timeout", "Exception (504) Reason: channel timeout"},
		{"code 1045, status=200, 200 ok", "code <n>, status=200, <n> ok"},
		{"ÜBER 42 straße7 ö12", "ÜBER <n> straße7 ö12"},
	} {
		if got := store.NormalizeError(c.in); got != c.want {
			t.Errorf("NormalizeError(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// TestNormalizeErrorOddInput feeds what a receiver may send back: nothing,
// invalid UTF-8, a megabyte. The result is valid UTF-8 and at most
// NormalizedErrorMaxRunes runes, and comes in bounded time.
func TestNormalizeErrorOddInput(t *testing.T) {
	t.Parallel()
	mib := 1 << 20
	for name, in := range map[string]string{
		"empty":            "",
		"spaces":           " \t\n ",
		"invalid utf-8":    "bad \xff\xfe\xc3 byte 42 \xe2\x82",
		"mixed runes":      strings.Repeat("é€𝄞 ", 100),
		"1 MiB of a":       strings.Repeat("a", mib),
		"1 MiB of digits":  strings.Repeat("7", mib),
		"1 MiB of quotes":  strings.Repeat(`\"`, mib/2),
		"1 MiB of opens":   strings.Repeat(`"a`, mib/2),
		"1 MiB of hosts":   strings.Repeat("a.", mib/2),
		"1 MiB of colons":  strings.Repeat("a:", mib/2),
		"1 MiB of spaces":  strings.Repeat(" ", mib) + "end 42",
		"1 MiB of invalid": strings.Repeat("\xff", mib),
		"1 MiB of words":   strings.Repeat("order 1234 unknown ", mib/19),
	} {
		start := time.Now()
		got := store.NormalizeError(in)
		took := time.Since(start)
		if !utf8.ValidString(got) {
			t.Errorf("%s: invalid UTF-8 %q", name, got)
		}
		if n := utf8.RuneCountInString(got); n > store.NormalizedErrorMaxRunes {
			t.Errorf("%s: %d runes", name, n)
		}
		if got != strings.TrimSpace(got) {
			t.Errorf("%s: not trimmed: %q", name, got)
		}
		// Linear work on a megabyte takes milliseconds; a second means
		// quadratic work, even on a loaded machine.
		if took > time.Second {
			t.Errorf("%s: took %v", name, took)
		}
	}
	for in, want := range map[string]string{
		"":                                  "",
		" \t\n ":                            "",
		"bad \xff\xfe byte 42":              "bad \uFFFD byte <n>",
		strings.Repeat(" ", mib) + "end 42": "end <n>",
	} {
		if got := store.NormalizeError(in); got != want {
			t.Errorf("NormalizeError(%.20q) = %q, want %q", in, got, want)
		}
	}
}

// TestNormalizeErrorCap checks the cut: at NormalizedErrorMaxRunes runes,
// on a rune boundary, never inside a placeholder, so that texts that
// differ only past the cap share a group.
func TestNormalizeErrorCap(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 300)
	if got := store.NormalizeError(long); got != strings.Repeat("é", store.NormalizedErrorMaxRunes) {
		t.Errorf("NormalizeError(300 × é) = %d runes %q", utf8.RuneCountInString(got), got)
	}
	in := strings.Repeat("x", store.NormalizedErrorMaxRunes-2) + " 1234 tail"
	if got, want := store.NormalizeError(in), strings.Repeat("x", store.NormalizedErrorMaxRunes-2); got != want {
		t.Errorf("a placeholder past the cap: got %q, want %q", got, want)
	}
	a := strings.Repeat("word ", 50) + "then order 1 unknown"
	b := strings.Repeat("word ", 50) + "then something else"
	if store.NormalizeError(a) != store.NormalizeError(b) {
		t.Error("texts that differ only past the cap are in different groups")
	}
}

// TestFingerprintKey checks that the key is short, stable and tells every
// field apart, including where one field ends and the next begins.
func TestFingerprintKey(t *testing.T) {
	t.Parallel()
	f := store.NewFingerprint("https://hooks.example.com/orders", "order-created", store.FailureAttemptsExhausted,
		"webhook: POST https://hooks.example.com/orders: 422 Unprocessable Entity: order 1234 unknown")
	if want := "webhook: POST https://hooks.example.com/orders: 422 Unprocessable Entity: order <n> unknown"; f.Message != want {
		t.Errorf("Message = %q, want %q", f.Message, want)
	}
	k := f.Key()
	// The key is stored: it must not change between versions unless the
	// fields do.
	if want := goldenKey; k != want {
		t.Errorf("Key() = %q, want %q", k, want)
	}
	if len(k) != 16 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Errorf("Key() = %q, want 16 lower-case hex digits", k)
	}
	same := store.NewFingerprint(f.Destination, f.EventType, f.Class,
		"webhook: POST https://hooks.example.com/orders: 422 Unprocessable Entity: order 98 unknown")
	if same.Key() != k {
		t.Error("two texts of one group have different keys")
	}
	keys := map[string]store.Fingerprint{k: f}
	for _, g := range []store.Fingerprint{
		{Destination: "https://hooks.example.com/other", EventType: f.EventType, Class: f.Class, Message: f.Message},
		{Destination: f.Destination, EventType: "order-paid", Class: f.Class, Message: f.Message},
		{Destination: f.Destination, EventType: f.EventType, Class: store.FailurePoison, Message: f.Message},
		{Destination: f.Destination, EventType: f.EventType, Class: f.Class, Message: "other"},
		{Destination: "a|b", EventType: "c"},
		{Destination: "a", EventType: "b|c"},
		{Destination: "a\x00", EventType: "b"},
		{Destination: "a", EventType: "\x00b"},
		{},
	} {
		if other, ok := keys[g.Key()]; ok {
			t.Errorf("%+v and %+v have the same key", g, other)
		}
		keys[g.Key()] = g
	}
}

// FuzzNormalizeError checks, on any input, that the result is valid
// UTF-8, within the cap, trimmed, and a fixed point: normalising a
// normalised text (shorter than the cap, where a cut could leave a
// different text) changes nothing, so stored groups can be recomputed.
func FuzzNormalizeError(f *testing.F) {
	for _, c := range realErrors {
		f.Add(c.a)
	}
	f.Add("bad \xff\xfe byte 42 'x' \"a b\" `c` \\\"d\\\" HTTP/1.1 500 [::1]:80 1.5s")
	f.Fuzz(func(t *testing.T, in string) {
		got := store.NormalizeError(in)
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) > store.NormalizedErrorMaxRunes || got != strings.TrimSpace(got) {
			t.Fatalf("NormalizeError(%q) = %q", in, got)
		}
		if utf8.RuneCountInString(got) < store.NormalizedErrorMaxRunes-10 {
			if again := store.NormalizeError(got); again != got {
				t.Fatalf("NormalizeError(%q) = %q, normalised again %q", in, got, again)
			}
		}
	})
}

// goldenKey is the key of the fingerprint in TestFingerprintKey, checked
// by hand: the first 8 bytes of SHA-256 over each field as a uvarint
// length and its bytes.
const goldenKey = "9d41993ad0bebe28"
