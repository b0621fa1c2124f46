package relayprom

import (
	"regexp"
	"sync"
)

// other is the label value that stands for every value beyond a bound.
const other = "_other"

// boundedSet admits at most max distinct label values; later values map to
// other, so a plain-SQL producer inventing types cannot grow the number
// of series without bound.
type boundedSet struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func newBoundedSet(max int) *boundedSet {
	return &boundedSet{max: max, seen: make(map[string]struct{})}
}

// label returns v when it is admitted (already seen, or room is left),
// else other.
func (b *boundedSet) label(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return other
	}
	b.seen[v] = struct{}{}
	return v
}

// values returns the admitted values.
func (b *boundedSet) values() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.seen))
	for v := range b.seen {
		out = append(out, v)
	}
	return out
}

// userinfo and query match the parts of a URL that may carry a secret
// (user:password@, ?token=…): a destination named by a webhook URL keeps
// its scheme, host and path only.
var (
	userinfo = regexp.MustCompile(`://[^/@\s]*@`)
	query    = regexp.MustCompile(`[?#][^\s]*`)
)

// destination cleans a destination name (sender.DestinationOf) for use as
// a label.
func destination(d string) string {
	d = userinfo.ReplaceAllString(d, "://")
	return query.ReplaceAllString(d, "")
}
