package store

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// maxInvalidSample bounds how much of an undecodable value an Invalid
// reason quotes.
const maxInvalidSample = 64

// DecodeHeaders reads a headers column as every dialect stores it: JSON
// text. txbox writes an object of strings, but a plain-SQL producer may
// write any JSON, so it is decoded leniently (docs/concepts.md, "Plain-SQL
// producers"): a string value is kept as is, null becomes "", and any
// other value (a number, a boolean, an array, an object) becomes its JSON
// text, so {"retries": 3} is delivered as the header retries=3. Empty input
// is no headers.
//
// Input that is not a JSON object at all (an array, a scalar, malformed
// text) cannot be turned into headers: DecodeHeaders returns an error that
// says why, which the dialect puts in OutboxRow.Invalid so the relay
// dead-letters that row instead of failing the whole claim.
func DecodeHeaders(raw []byte) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "{}" {
		return nil, nil
	}
	// The common case, decoded without encoding/json (which cost the
	// relay's claim more than a microsecond per row in reflection and
	// allocations): a flat object of plain strings.
	if h, ok := decodeFlat(raw); ok {
		return h, nil
	}
	// What txbox itself wrote, with escapes or non-ASCII text.
	var h map[string]string
	if err := json.Unmarshal(raw, &h); err == nil && raw[0] == '{' {
		return h, nil
	}
	var obj map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return nil, fmt.Errorf("headers are not a JSON object: %s", sample(raw))
	}
	h = make(map[string]string, len(obj))
	for k, v := range obj {
		var s string
		switch {
		case json.Unmarshal(v, &s) == nil:
			h[k] = s
		case string(v) == "null":
			h[k] = ""
		default:
			// Compact keeps the text as the producer wrote it, minus
			// insignificant white space (PostgreSQL's jsonb output adds
			// some).
			var b bytes.Buffer
			if json.Compact(&b, v) == nil {
				h[k] = b.String()
			} else {
				h[k] = string(v)
			}
		}
	}
	return h, nil
}

// decodeFlat decodes raw when it is an object whose keys and values are
// all strings of printable ASCII without a quote or a backslash, with
// JSON white space between the tokens: what txbox and most producers
// write. It reports false for anything else (escapes, other characters,
// other values, malformed text), which DecodeHeaders then decodes with
// encoding/json; on what it accepts the two agree, including a repeated
// key (the last one wins).
func decodeFlat(raw []byte) (map[string]string, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	// Count the pairs first (every pair has a colon outside a string,
	// and a plain string holds no colon-confusing escapes) so that the
	// map is sized once.
	n := 0
	for _, c := range raw {
		if c == ':' {
			n++
		}
	}
	h := make(map[string]string, n)
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return h, skipSpace(raw, i+1) == len(raw)
	}
	for {
		k, j, ok := plainString(raw, i)
		if !ok {
			return nil, false
		}
		j = skipSpace(raw, j)
		if j >= len(raw) || raw[j] != ':' {
			return nil, false
		}
		v, j, ok := plainString(raw, skipSpace(raw, j+1))
		if !ok {
			return nil, false
		}
		h[k] = v
		j = skipSpace(raw, j)
		if j >= len(raw) {
			return nil, false
		}
		switch raw[j] {
		case ',':
			i = skipSpace(raw, j+1)
		case '}':
			return h, skipSpace(raw, j+1) == len(raw)
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string at raw[i] when it holds only
// printable ASCII without a backslash, returning it and the index after
// its closing quote.
func plainString(raw []byte, i int) (string, int, bool) {
	if i >= len(raw) || raw[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			return string(raw[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", 0, false
		}
	}
	return "", 0, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// sample quotes the start of an undecodable value for an error message,
// as valid text.
func sample(raw []byte) string {
	if len(raw) > maxInvalidSample {
		return fmt.Sprintf("%q…", SanitizeText(string(raw[:maxInvalidSample])))
	}
	return fmt.Sprintf("%q", SanitizeText(string(raw)))
}
