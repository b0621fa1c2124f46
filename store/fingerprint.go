package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The failure classes of a dead letter: why the relay gave up on the row.
// They are the Class of a Fingerprint, so that a receiver refusing a
// message and a message the relay could not even build never share a
// failure group, whatever their texts. Each names one relay outcome that
// ends in the dead-letter table (docs/operations.md, "Dead letters";
// docs/concepts.md, "Outages versus poison"). The relay does not record
// the class yet: today a permanent failure and an unsendable row fail at
// once, and poison and exhausted attempts share one path (a counted
// failure at max-attempts), told apart only by txbox.Classify of the last
// error (transient or not).
const (
	// FailurePermanent: the sender marked the failure permanent
	// (txbox.Classify returns txbox.ClassPermanent: a message over the
	// destination's size limit, a webhook 413 or a status listed in
	// permanent-status, a header the protocol cannot carry). The relay
	// fails the row at its first try, without retrying.
	FailurePermanent = "permanent"
	// FailurePoison: the last failure was transient (txbox.ClassTransient,
	// a 5xx, a timeout) yet counted an attempt, because the destination
	// acknowledged other messages meanwhile, and the attempts reached
	// max-attempts. An outage never ends here: its failures count nothing.
	FailurePoison = "poison"
	// FailureUndecodable: the row could never be turned into a message
	// (store.OutboxRow.Invalid, which includes a WAL-mode event that did not
	// decode, UndecodableEventType). The relay dead-letters it unsent.
	FailureUndecodable = "undecodable"
	// FailureAttemptsExhausted: the destination rejected the message
	// (txbox.ClassRejected, which includes every unclassified error: an
	// HTTP 422, an unknown topic, a missing exchange) on each of its
	// max-attempts tries.
	FailureAttemptsExhausted = "attempts_exhausted"
)

// NormalizedErrorMaxRunes bounds the length of what NormalizeError
// returns, in runes (not bytes, so that a column sized in characters, as
// MySQL's VARCHAR is, always holds it). The head of an error names what
// went wrong; what lies past it (a receiver's long detail, a list of
// limits) would only split a group on text nobody reads when triaging.
const NormalizedErrorMaxRunes = 200

// The placeholders that stand for the variable parts of an error text.
// They are written in angle brackets, which none of the senders' own
// wording uses, so a reader tells them from the text at a glance.
const (
	phNumber   = "<n>"
	phHex      = "<hex>"
	phUUID     = "<uuid>"
	phTime     = "<time>"
	phDuration = "<dur>"
	phAddr     = "<addr>"
	phQuoted   = "<q>"
)

const (
	// hostWindow bounds a host name of a host:port (253 bytes is DNS's
	// limit).
	hostWindow = 253
)

// Fingerprint identifies a failure group of dead letters: the dead letters
// that failed in the same place, for the same reason, with the same error
// once its variable parts (ids, numbers, quoted values, times, addresses)
// are set aside. An operator woken by a thousand dead letters then sees a
// handful of groups ("orders webhook, HTTP 422: order <n> unknown") instead
// of a thousand rows, and can retry or resolve a group at once.
type Fingerprint struct {
	// Destination is the route or destination the message was sent to
	// (a webhook URL, a topic, a subject, an exchange, a stream).
	Destination string
	// EventType is the event's type.
	EventType string
	// Class is one of the Failure* constants.
	Class string
	// Message is the last error, normalised by NormalizeError.
	Message string
}

// NewFingerprint returns the fingerprint of a dead letter whose last error
// is errText: errText goes through NormalizeError, the other fields are
// kept as they are (they name the group and hold no variable part).
func NewFingerprint(destination, eventType, class, errText string) Fingerprint {
	return Fingerprint{Destination: destination, EventType: eventType, Class: class, Message: NormalizeError(errText)}
}

// Key returns 16 lower-case hex digits (the first 64 bits of a SHA-256)
// that stand for f: short and fixed-length, so it suits an indexed column,
// and the same for the same fields on every machine and version. Each
// field is hashed with its length in front, so no two different field
// lists hash the same input ("a|b", "c" and "a", "b|c" differ). 64 bits
// make a collision among the groups of one table negligible (about one
// in 10^10 for 100,000 groups). Key does not normalise Message: build f
// with NewFingerprint, or normalise it yourself. A change to the rules
// of NormalizeError changes the keys of new dead letters, not the stored
// ones, so it splits the groups that span the change.
func (f Fingerprint) Key() string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, s := range [...]string{f.Destination, f.EventType, f.Class, f.Message} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:8])
}

// NormalizeError returns msg with its variable parts replaced by
// placeholders, so that two errors that differ only in them are equal:
// "HTTP 422: order 1234 unknown" and "HTTP 422: order 98 unknown" both
// become "HTTP 422: order <n> unknown". It is deterministic, runs in time
// linear in msg (it stops reading once the result is full), and accepts
// any bytes (invalid UTF-8 becomes U+FFFD).
//
// What it replaces, where a token starts (after a character that is not a
// letter or digit, or after a placeholder; "v2", "sha256", "4xx" stay as
// they are, and in order_1234 the underscore separates):
//
//   - a UUID (a txbox event id): <uuid>
//   - a date, a time of day or both (RFC 3339, "2006-01-02 15:04:05.000
//     -0700 MST", "2006/01/02 15:04:05"): <time>
//   - an IPv4 or IPv6 address, with its port if any, and a dotted host
//     name or localhost with a port: <addr>
//   - 0x followed by hex digits, and a run of 8 or more hex digits with at
//     least one digit and one letter (an id such as 01a24e59): <hex>
//   - a duration such as 1.5s, 250ms or 1m30s: <dur>
//   - a number (integer or decimal): <n>, except an HTTP status code (see
//     below)
//   - a quoted value ("…", '…', `…`, and \"…\" inside a Go-quoted text)
//     with no white space in it: <q>. A quoted text with white space is
//     kept, quotes and all, and its inside normalised: it is a message
//     (an AMQP reason, a JSON body), whose words tell errors apart.
//
// A number from 100 to 599 is kept when it is a status code: right after
// "HTTP", "HTTP/1.1", "status", "statusCode", "code" or "exception" (with
// only white space and ":", "=", "(" or "#" between them), or followed by
// a space and a capitalised word, as in the status line form "422
// Unprocessable Entity" the webhook sender writes. HTTP 422 and HTTP 500
// are different failures and must stay different groups. A 3-digit
// number elsewhere ("order 422") is a number like any other.
//
// A normalised text normalises to itself (when shorter than the cap), so
// the groups of stored texts can be recomputed.
//
// White space runs (and control characters) become one space, the result
// is trimmed and cut to NormalizedErrorMaxRunes runes, on a rune boundary
// and never inside a placeholder. Case is kept: the codes that tell
// errors apart are upper case (NOT_FOUND, WRONGTYPE,
// UNKNOWN_TOPIC_OR_PARTITION), one sender always writes a given error in
// the same case, so folding would merge nothing that should be merged,
// and the result is shown to operators as the group's title.
func NormalizeError(msg string) string {
	n := normalizer{in: strings.ToValidUTF8(msg, "\uFFFD")}
	n.run()
	return strings.TrimRight(n.out.String(), " ")
}

// normalizer is one run of NormalizeError: it reads in from left to right
// and writes out, one token per step. Every step but a white space run
// writes at least one rune, and the run stops when out is full, so there
// are at most about 2 × NormalizedErrorMaxRunes steps; each looks ahead
// at most to the next white space, so the work is linear in the length
// of in whatever its content.
type normalizer struct {
	in    string
	out   strings.Builder
	runes int
	full  bool
	space bool // white space was read and is not written yet
	// status is set while the next number may be a status code: after a
	// status word and the punctuation allowed after it.
	status bool
	// afterHTTP is set right after the word HTTP; version right after
	// "HTTP/", where the number is the protocol version.
	afterHTTP, version bool
	quote              byte // the quote of a quoted text being read, or 0
}

func (n *normalizer) run() {
	for i := 0; i < len(n.in) && !n.full; {
		if w := spaceAt(n.in, i); w > 0 {
			for w > 0 {
				i += w
				w = spaceAt(n.in, i)
			}
			n.space = true
			n.version, n.afterHTTP = false, false
			continue
		}
		if !n.afterWord() {
			if k, ph := n.variable(i); k > 0 {
				n.placeholder(ph)
				i += k
				continue
			}
		}
		if k := n.quoted(i); k > 0 {
			i += k
			continue
		}
		if k := wordLen(n.in, i); k > 0 {
			n.word(n.in[i : i+k])
			i += k
			continue
		}
		r, w := utf8.DecodeRuneInString(n.in[i:])
		n.punct(r)
		i += w
	}
}

// variable returns the length and placeholder of the variable part that
// starts at i, or 0. The order matters: a UUID or a time would otherwise
// be read as hex runs and numbers.
func (n *normalizer) variable(i int) (int, string) {
	s := n.in[i:]
	if k := uuidLen(s); k > 0 {
		return k, phUUID
	}
	if k := timeLen(s); k > 0 {
		return k, phTime
	}
	if k := addrLen(s); k > 0 {
		return k, phAddr
	}
	if k := hexLen(s); k > 0 {
		return k, phHex
	}
	return n.number(i)
}

// number returns the length and placeholder of the number or duration at
// i, or 0 when there is none, or when it is a status code or a protocol
// version, which the caller then writes as a word.
func (n *normalizer) number(i int) (int, string) {
	s := n.in[i:]
	k := decimalLen(s)
	if k == 0 {
		return 0, ""
	}
	if d := durationLen(s); d > 0 {
		return d, phDuration
	}
	if !endsToken(s, k) {
		// 4xx, 3rd, 10KiB are names, but in 1.5x the 1 is a number, as it
		// is when the text is read again: a normalised text must normalise
		// to itself.
		if k = digits(s, k); !endsToken(s, k) {
			return 0, ""
		}
	}
	if n.version {
		return 0, "" // HTTP/1.1
	}
	if k == 3 && digits(s, 4) == 3 && s[0] >= '1' && s[0] <= '5' && (n.status || reasonPhrase(s[3:])) {
		return 0, ""
	}
	return k, phNumber
}

// reasonPhrase reports whether s starts with a space and a capitalised
// word of letters only, ended by the end, a space, one of ",;)" or a ":"
// at the end or before a space: the reason phrase after a status code
// ("422 Unprocessable Entity", and "409 Conflict: …" as the webhook
// sender writes a status with a detail; not "100 A::0", an IPv6 address). A word that
// normalising could change (A0000000, Foo.example.com:80) does not count:
// a normalised text must normalise to itself.
func reasonPhrase(s string) bool {
	if len(s) < 2 || s[0] != ' ' || s[1] < 'A' || s[1] > 'Z' {
		return false
	}
	k := 2
	for k < len(s) && (s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z') {
		k++
	}
	switch {
	case k == len(s) || strings.IndexByte(" ,;)", s[k]) >= 0:
		return true
	case s[k] == ':':
		return k+1 == len(s) || s[k+1] == ' '
	}
	return false
}

// quoted reads a quote character at i. A quoted value (no white space in
// it) is written as a placeholder; the quote of a quoted text is written
// as it is, and remembered so that its closing quote is not taken for the
// opening of a value. It returns how much of in it read, or 0 when there
// is no quote at i.
func (n *normalizer) quoted(i int) int {
	s := n.in[i:]
	var q string
	switch {
	case strings.HasPrefix(s, `\"`):
		q = `\"`
	case s[0] == '"' || s[0] == '`':
		if n.quote == s[0] {
			n.quote = 0 // the end of a quoted text
			n.punct(rune(s[0]))
			return 1
		}
		q = s[:1]
	case s[0] == '\'':
		if n.quote == '\'' && !n.space {
			n.quote = 0 // the end of a quoted text: 'no queue here'
			n.punct('\'')
			return 1
		}
		if n.afterWord() {
			return 0 // an apostrophe: the broker's
		}
		q = "'"
	default:
		return 0
	}
	if k := valueLen(s, q); k > 0 {
		n.placeholder(phQuoted)
		return k
	}
	if n.quote == 0 && len(q) == 1 {
		n.quote = q[0]
	}
	for _, r := range q {
		n.punct(r)
	}
	return len(q)
}

// afterWord reports whether the last rune written is a letter or digit,
// with no white space after it: no token starts there (v2, sha256), and an
// apostrophe there is not a quote (the broker's). It looks at what was
// written, not at what was read, so that the text after a placeholder is
// read as it is when the result is normalised again: in 4::1 and 4'2' the
// 4 becomes <n>, and ::1 and '2' are read as in <n>::1 and <n>'2'.
func (n *normalizer) afterWord() bool {
	if n.space {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(n.out.String())
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// valueLen returns the length of the quoted value at the start of s,
// quotes included, whose quote is q, or 0 when the quote does not close
// before white space. Inside "…" a backslash escapes the next byte, as in
// Go's %q. The search has no other bound: one would make a long value
// read differently once its inside is normalised. Its cost is bounded by
// the run of non-space bytes, and a run only costs once per step.
func valueLen(s, q string) int {
	for j := len(q); j < len(s); j++ {
		switch {
		case strings.HasPrefix(s[j:], q):
			return j + len(q)
		case s[j] == '\\' && q == `"`:
			if spaceAt(s, j+1) > 0 {
				return 0 // white space, escaped or not, ends a value
			}
			j++
		case spaceAt(s, j) > 0:
			return 0
		}
	}
	return 0
}

// word writes a word (letters and digits) and notes whether it opens a
// status code.
func (n *normalizer) word(w string) {
	n.literal(w)
	if n.version {
		return // the protocol version goes on: HTTP/1.1
	}
	n.afterHTTP = strings.EqualFold(w, "HTTP")
	n.status = n.afterHTTP
	for _, sw := range [...]string{"status", "statuscode", "code", "exception"} {
		if strings.EqualFold(w, sw) {
			n.status = true
		}
	}
}

// punct writes one rune that is neither white space nor part of a word.
func (n *normalizer) punct(r rune) {
	var buf [utf8.UTFMax]byte
	n.literal(string(buf[:utf8.EncodeRune(buf[:], r)]))
	switch {
	case r == '/' && n.afterHTTP:
		n.version = true
	case r == '.' && n.version:
		// HTTP/1.1: the version goes on.
	case n.status && strings.ContainsRune(":=(#", r):
	default:
		n.status, n.version = false, false
	}
	n.afterHTTP = false
}

func (n *normalizer) placeholder(ph string) {
	n.status, n.version, n.afterHTTP = false, false, false
	if !n.flushSpace() || n.runes+len(ph) > NormalizedErrorMaxRunes {
		n.full = true
		return
	}
	n.out.WriteString(ph)
	n.runes += len(ph)
}

// literal writes s, or as much of it as fits.
func (n *normalizer) literal(s string) {
	if !n.flushSpace() {
		return
	}
	for _, r := range s {
		if n.runes == NormalizedErrorMaxRunes {
			n.full = true
			return
		}
		n.out.WriteRune(r)
		n.runes++
	}
}

// flushSpace writes the pending space, if any, unless out is empty (the
// result is trimmed). It reports false when out is full.
func (n *normalizer) flushSpace() bool {
	if n.runes >= NormalizedErrorMaxRunes {
		n.full = true
		return false
	}
	if n.space && n.runes > 0 {
		n.out.WriteByte(' ')
		n.runes++
	}
	n.space = false
	return true
}

// spaceAt returns the length of the white space or control character at
// s[i], or 0.
func spaceAt(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		if c <= ' ' || c == 0x7f {
			return 1
		}
		return 0
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if unicode.IsSpace(r) || unicode.IsControl(r) {
		return w
	}
	return 0
}

// wordLen returns the length of the run of letters and digits at s[i].
func wordLen(s string, i int) int {
	j := i
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf {
			if !isAlnum(c) {
				break
			}
			j++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			break
		}
		j += w
	}
	return j - i
}

// endsToken reports whether nothing of a word follows s[k:]: the end, or
// a rune that is not a letter or digit.
func endsToken(s string, k int) bool {
	return k >= len(s) || wordLen(s, k) == 0
}

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// digits returns how many ASCII digits s starts with, up to max.
func digits(s string, max int) int {
	k := 0
	for k < len(s) && k < max && isDigit(s[k]) {
		k++
	}
	return k
}

// uuidLen returns 36 when s starts with a UUID (8-4-4-4-12 hex digits),
// else 0.
func uuidLen(s string) int {
	if len(s) < 36 || !endsToken(s, 36) {
		return 0
	}
	for j := 0; j < 36; j++ {
		if j == 8 || j == 13 || j == 18 || j == 23 {
			if s[j] != '-' {
				return 0
			}
		} else if !isHex(s[j]) {
			return 0
		}
	}
	return 36
}

// timeLen returns the length of the date, time of day, or both at the
// start of s, with fractional seconds and a zone, or 0.
func timeLen(s string) int {
	k := dateLen(s)
	switch {
	case k > 0 && k+1 < len(s) && strings.IndexByte("Tt _", s[k]) >= 0:
		if c := clockLen(s[k+1:]); c > 0 {
			k += 1 + c
			k += zoneLen(s[k:])
		}
	case k == 0:
		if k = clockLen(s); k == 0 {
			return 0
		}
		k += zoneLen(s[k:])
	}
	if !endsToken(s, k) {
		return 0
	}
	return k
}

// dateLen returns 10 when s starts with 2006-01-02 or 2006/01/02.
func dateLen(s string) int {
	if len(s) < 10 || digits(s, 4) != 4 || s[4] != '-' && s[4] != '/' ||
		digits(s[5:], 2) != 2 || s[7] != s[4] || digits(s[8:], 2) != 2 {
		return 0
	}
	return 10
}

// clockLen returns the length of 15:04:05, with fractional seconds if
// any, at the start of s, or 0.
func clockLen(s string) int {
	if len(s) < 8 || digits(s, 2) != 2 || s[2] != ':' || digits(s[3:], 2) != 2 ||
		s[5] != ':' || digits(s[6:], 2) != 2 {
		return 0
	}
	k := 8
	if k+1 < len(s) && (s[k] == '.' || s[k] == ',') && isDigit(s[k+1]) {
		k++
		k += digits(s[k:], len(s))
	}
	return k
}

// zoneLen returns the length of the zone after a time of day: Z, +07:00,
// +0700, or " +0700" and a zone name as Go prints a time.Time; or " UTC"
// and " GMT".
func zoneLen(s string) int {
	switch {
	case s == "":
		return 0
	case s[0] == 'Z' || s[0] == 'z':
		return 1
	case s[0] == '+' || s[0] == '-':
		if len(s) >= 6 && digits(s[1:], 2) == 2 && s[3] == ':' && digits(s[4:], 2) == 2 {
			return 6
		}
		if digits(s[1:], 4) == 4 {
			return 5
		}
	case s[0] == ' ':
		if strings.HasPrefix(s, " UTC") || strings.HasPrefix(s, " GMT") {
			return 4
		}
		if len(s) > 5 && (s[1] == '+' || s[1] == '-') && digits(s[2:], 4) == 4 {
			if len(s) > 7 && s[6] == ' ' {
				if j := upperLen(s[7:]); j >= 3 && j <= 5 {
					return 7 + j
				}
			}
			return 6
		}
	}
	return 0
}

func upperLen(s string) int {
	k := 0
	for k < len(s) && s[k] >= 'A' && s[k] <= 'Z' {
		k++
	}
	return k
}

// addrLen returns the length of the network address at the start of s:
// an IPv4 address, a bracketed IPv6 address, either with a port; a bare
// IPv6 address; or a dotted host name or localhost with a port. 0 when
// there is none.
func addrLen(s string) int {
	k := ipv4Len(s)
	switch {
	case k > 0:
	case s[0] == '[':
		j := strings.IndexByte(s[:min(len(s), 48)], ']')
		if j < 3 || ipv6Len(s[1:j], true) != j-1 {
			return 0
		}
		// The bracket ends the address: [::]0 reads as it does once the 0
		// is a placeholder.
		return j + 1 + portLen(s[j+1:])
	default:
		if k = ipv6Len(s, false); k > 0 {
			return k // a port after a bare IPv6 address cannot be told apart
		}
		h := 0
		for h < len(s) && h < hostWindow && (isAlnum(s[h]) || s[h] == '.' || s[h] == '-') {
			h++
		}
		host := s[:h]
		if !strings.EqualFold(host, "localhost") && !(strings.Contains(host, ".") && host[h-1] != '.') {
			return 0
		}
		if p := portLen(s[h:]); p > 0 {
			return h + p
		}
		return 0
	}
	k += portLen(s[k:])
	if !endsToken(s, k) || k+1 < len(s) && s[k] == '.' && isDigit(s[k+1]) {
		return 0
	}
	return k
}

// portLen returns the length of ":port" (1 to 5 digits) at the start of
// s, or 0.
func portLen(s string) int {
	if len(s) < 2 || s[0] != ':' {
		return 0
	}
	d := digits(s[1:], 6)
	if d == 0 || d > 5 || !endsToken(s, 1+d) {
		return 0
	}
	return 1 + d
}

// ipv4Len returns the length of the dotted quad at the start of s, or 0.
func ipv4Len(s string) int {
	k := 0
	for part := 0; part < 4; part++ {
		if part > 0 {
			if k >= len(s) || s[k] != '.' {
				return 0
			}
			k++
		}
		d := digits(s[k:], 4)
		if d == 0 || d > 3 {
			return 0
		}
		k += d
	}
	return k
}

// ipv6Len returns the length of the IPv6 address at the start of s: hex
// groups of at most 4 digits and colons, with "::" or all 8 groups, or 0.
// Only in brackets may it end with a colon ([::]:8080): a bare fe80::
// followed by a number would be read otherwise once the number is a
// placeholder.
func ipv6Len(s string, bracketed bool) int {
	k, colons, group, hexes := 0, 0, 0, 0
	for k < len(s) && k < 45 && (isHex(s[k]) || s[k] == ':') {
		if s[k] == ':' {
			colons++
			group = 0
		} else if group++; group > 4 {
			return 0
		} else {
			hexes++
		}
		k++
	}
	if colons < 2 || !bracketed && (hexes == 0 || s[k-1] == ':') ||
		!strings.Contains(s[:k], "::") && colons != 7 || !endsToken(s, k) {
		return 0
	}
	return k
}

// hexLen returns the length of a hex number or id at the start of s:
// 0x and hex digits, or 8 or more hex digits with at least one digit and
// one letter (a run of digits alone is a number); else 0.
func hexLen(s string) int {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && isHex(s[2]) {
		k := 2
		for k < len(s) && isHex(s[k]) {
			k++
		}
		if endsToken(s, k) {
			return k
		}
		return 0
	}
	k, letters := 0, 0
	for k < len(s) && isHex(s[k]) {
		if !isDigit(s[k]) {
			letters++
		}
		k++
	}
	if k < 8 || letters == 0 || letters == k || !endsToken(s, k) {
		return 0
	}
	return k
}

// decimalLen returns the length of the integer or decimal at the start
// of s, or 0.
func decimalLen(s string) int {
	k := digits(s, len(s))
	if k > 0 && k+1 < len(s) && s[k] == '.' && isDigit(s[k+1]) {
		k++
		k += digits(s[k:], len(s))
	}
	return k
}

// durationUnits are the units of a Go duration, longest first so that
// "ms" is not read as minutes.
var durationUnits = [...]string{"ns", "us", "µs", "μs", "ms", "h", "m", "s"}

// durationLen returns the length of the duration (1.5s, 250ms, 1m30s) at
// the start of s, or 0.
func durationLen(s string) int {
	k := 0
	for {
		d := decimalLen(s[k:])
		if d == 0 {
			break
		}
		u := ""
		for _, unit := range durationUnits {
			if strings.HasPrefix(s[k+d:], unit) {
				u = unit
				break
			}
		}
		if u == "" {
			return 0
		}
		k += d + len(u)
	}
	if k == 0 || !endsToken(s, k) {
		return 0
	}
	return k
}
