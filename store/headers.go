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
	// The common case: what txbox itself wrote.
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

// sample quotes the start of an undecodable value for an error message,
// as valid text.
func sample(raw []byte) string {
	if len(raw) > maxInvalidSample {
		return fmt.Sprintf("%q…", SanitizeText(string(raw[:maxInvalidSample])))
	}
	return fmt.Sprintf("%q", SanitizeText(string(raw)))
}
