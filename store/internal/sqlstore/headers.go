package sqlstore

import (
	"encoding/json"
	"fmt"
)

// EncodeHeaders renders an event's headers as the headers column's JSON
// object text, "{}" for none (store.DecodeHeaders reads it back). An
// error names the dialect.
func EncodeHeaders(dialect string, h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("%s: encode headers: %w", dialect, err)
	}
	return string(b), nil
}
