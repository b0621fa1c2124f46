// Package keypath spells the key paths that configuration errors name, the
// same way in the relay's validator and in the YAML loader
// (docs/configuration.md, "Strictness").
package keypath

import (
	"strconv"
	"strings"
)

// Join appends key to path with a dot. A key that itself contains a dot or
// a bracket (an event type such as "order.created") is bracketed and
// quoted, so the path stays unambiguous: events["order.created"].batch-size.
func Join(path, key string) string {
	if strings.ContainsAny(key, ".[]") {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}
