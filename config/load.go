package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/txbox/txbox/relay"
)

// EnvPrefix starts every environment variable that overrides a key.
const EnvPrefix = "TXBOX_"

// maxFileSize bounds the configuration file Load reads.
const maxFileSize = 4 << 20

// Source is the input of Load.
type Source struct {
	// Name labels the YAML in error messages, usually its file name.
	// Defaults to "config".
	Name string
	// YAML is the file's content. Empty means no file: defaults plus
	// overrides.
	YAML []byte
	// Env is the environment as KEY=VALUE strings (os.Environ()). Only
	// variables named after a key (see EnvName) are read; empty values
	// are ignored. Nil means no environment overrides.
	Env []string
	// Set are key=value overrides from the command line, applied after
	// the environment ("defaults.batch-size=500",
	// "events.order-created.route.subject=orders.created").
	Set []string
}

// LoadFile reads the YAML file at path and calls Load with the process
// environment and the given flag overrides. An empty path loads only
// defaults and overrides.
func LoadFile(path string, set []string) (*Config, error) {
	src := Source{Name: path, Env: os.Environ(), Set: set}
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
		if err != nil {
			return nil, fmt.Errorf("config: read %s: %w", path, err)
		}
		src.YAML = data
	}
	return Load(src)
}

// Load parses the YAML, applies environment then flag overrides, fills in
// defaults and validates the result. Unknown keys, duplicate keys, values
// of the wrong type and out-of-range values are all reported, each with
// its key path; the error matches ErrInvalid and is an Errors.
//
// Precedence, lowest first: built-in defaults, the file, TXBOX_*
// environment variables, Set.
func Load(src Source) (*Config, error) {
	if src.Name == "" {
		src.Name = "config"
	}
	if len(src.YAML) > maxFileSize {
		return nil, Errors{{Source: src.Name, Msg: fmt.Sprintf("larger than %d bytes", maxFileSize)}}
	}
	root, err := parseRoot(src.Name, src.YAML)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: src.Name, sources: map[string]string{}}
	if err := applyEnv(root, src.Env, d.sources); err != nil {
		return nil, err
	}
	if err := applySet(root, src.Set, d.sources); err != nil {
		return nil, err
	}
	c := Default()
	d.decode("", root, reflect.ValueOf(c).Elem())
	if len(d.errs) == 0 {
		c.validate(d)
	}
	if len(d.errs) > 0 {
		return nil, Errors(d.errs)
	}
	c.recordOrigins(d)
	c.getenv = lookupIn(src.Env)
	return c, nil
}

// parseRoot parses exactly one YAML document into its root mapping node;
// an empty document gives an empty mapping.
func parseRoot(name string, data []byte) (*yaml.Node, error) {
	empty := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if len(bytes.TrimSpace(data)) == 0 {
		return empty, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return empty, nil
		}
		return nil, Errors{{Source: name, Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{Source: name, Line: extra.Line, Msg: "more than one YAML document"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, Errors{{Source: name, Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return empty, nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return empty, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, Errors{{Source: name, Line: root.Line, Msg: "the top level must be a mapping of keys (database, senders, defaults, events, cleanup, relay, log)"}}
	}
	return root, nil
}

// leaf is one key that takes a value, with its path segments.
type leaf struct {
	segs []string
}

func (l leaf) path() string {
	p := ""
	for _, s := range l.segs {
		p = join(p, s)
	}
	return p
}

// EnvName returns the environment variable that overrides the key with the
// given path segments: TXBOX_ followed by the segments, upper-cased, every
// character outside [A-Z0-9] replaced by '_', joined by '_'. For example
// defaults.batch-size is TXBOX_DEFAULTS_BATCH_SIZE and
// events.order-created.polling.max-delay is
// TXBOX_EVENTS_ORDER_CREATED_POLLING_MAX_DELAY.
func EnvName(segs ...string) string {
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(EnvPrefix, "_"))
	for _, s := range segs {
		b.WriteByte('_')
		for _, r := range strings.ToUpper(s) {
			if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// leaves lists every key that takes a value: the fixed keys, and the keys
// of each sender and event type that root (the file) defines.
func leaves(root *yaml.Node) []leaf {
	var out []leaf
	var walk func(t reflect.Type, segs []string, n *yaml.Node)
	walk = func(t reflect.Type, segs []string, n *yaml.Node) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == reflect.TypeOf(Sender{}):
			out = append(out, leaf{segs: appendSeg(segs, "type")})
			typ := child(n, "type")
			if typ == nil || senderTypes[typ.Value] == nil {
				return
			}
			// The settings' keys, nested blocks (tls, sasl) key by key.
			walk(reflect.TypeOf(senderTypes[typ.Value](&Sender{})).Elem(), segs, n)
		case t.Kind() == reflect.Struct && t != durationType:
			for _, f := range keyFields(t) {
				walk(t.FieldByIndex(f.index).Type, appendSeg(segs, f.name), child(n, f.name))
			}
			// A renamed key's old name still takes a value (an
			// environment variable or --set may name it).
			for old, renamed := range renamedKeys[t] {
				if i, ok := fieldByKey(t, renamed); ok {
					walk(t.FieldByIndex(i).Type, appendSeg(segs, old), child(n, old))
				}
			}
		case t.Kind() == reflect.Map:
			n = resolve(n)
			if n == nil || n.Kind != yaml.MappingNode {
				return
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := resolve(n.Content[i])
				if k == nil || k.Kind != yaml.ScalarNode {
					continue
				}
				walk(t.Elem(), appendSeg(segs, k.Value), resolve(n.Content[i+1]))
			}
		default:
			out = append(out, leaf{segs: segs})
		}
	}
	walk(reflect.TypeOf(Config{}), nil, root)
	return out
}

func appendSeg(segs []string, s string) []string {
	out := make([]string, len(segs)+1)
	copy(out, segs)
	out[len(segs)] = s
	return out
}

// child returns the value of key in mapping n, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := resolve(n.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// setPath stores value as a scalar at segs under root, creating mappings
// on the way. It returns false when a node on the way is not a mapping (the
// decoder then reports that node's error).
func setPath(root *yaml.Node, segs []string, value string) bool {
	n := root
	for i, s := range segs {
		n = resolve(n)
		if n == nil || n.Kind != yaml.MappingNode {
			if n != nil && isNull(n) {
				*n = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			} else {
				return false
			}
		}
		next := child(n, s)
		if i == len(segs)-1 {
			v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
			if next != nil {
				for j := 0; j+1 < len(n.Content); j += 2 {
					if n.Content[j+1] == next {
						n.Content[j+1] = v
					}
				}
			} else {
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}, v)
			}
			return true
		}
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}, next)
		}
		n = next
	}
	return true
}

// applyEnv applies TXBOX_* variables named after a key (see EnvName).
// Variables with the prefix that name no key are left alone: the prefix is
// shared with other settings (such as TXBOX_TEST_POSTGRES_URL).
func applyEnv(root *yaml.Node, env []string, sources map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	vals := make(map[string]string)
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, EnvPrefix) && v != "" {
			vals[k] = v
		}
	}
	if len(vals) == 0 {
		return nil
	}
	byName := make(map[string][]leaf)
	for _, l := range leaves(root) {
		byName[EnvName(l.segs...)] = append(byName[EnvName(l.segs...)], l)
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	var errs Errors
	for _, name := range names {
		ls := byName[name]
		switch {
		case len(ls) == 0:
			continue
		case len(ls) > 1:
			errs = append(errs, &Error{Source: "environment variable " + name, Msg: fmt.Sprintf("ambiguous: it names both %s and %s; set the key in the file instead", ls[0].path(), ls[1].path())})
			continue
		}
		if setPath(root, ls[0].segs, vals[name]) {
			sources[ls[0].path()] = "environment variable " + name
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// applySet applies key=value overrides. The key is a dot path; the event
// type or sender name in events.<type>.<key> and senders.<name>.<key> may
// itself contain dots, and may name an entry the file does not have.
func applySet(root *yaml.Node, set []string, sources map[string]string) error {
	var errs Errors
	for _, kv := range set {
		path, value, ok := strings.Cut(kv, "=")
		src := "flag --set " + clip(path)
		if !ok || path == "" {
			errs = append(errs, &Error{Source: "flag --set", Msg: fmt.Sprintf("%q must be key=value", clip(kv))})
			continue
		}
		segs, ok := splitSetPath(root, path)
		if !ok {
			errs = append(errs, &Error{Source: src, Path: path, Msg: "unknown key"})
			continue
		}
		l := leaf{segs: segs}
		if setPath(root, segs, value) {
			sources[l.path()] = src
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// splitSetPath maps a dotted path to key segments.
func splitSetPath(root *yaml.Node, path string) ([]string, bool) {
	for _, l := range leaves(root) {
		if strings.Join(l.segs, ".") == path || l.path() == path {
			return l.segs, true
		}
	}
	// An entry of senders or events that the file does not define: the
	// middle is the name, the end one of the entry's keys.
	tryMap := func(prefix string, keys [][]string) ([]string, bool) {
		if !strings.HasPrefix(path, prefix+".") {
			return nil, false
		}
		rest := strings.TrimPrefix(path, prefix+".")
		var best []string
		for _, k := range keys {
			suffix := "." + strings.Join(k, ".")
			if strings.HasSuffix(rest, suffix) && len(rest) > len(suffix) && (best == nil || len(k) > len(best)) {
				best = k
			}
		}
		if best == nil {
			return nil, false
		}
		name := strings.TrimSuffix(rest, "."+strings.Join(best, "."))
		return append([]string{prefix, name}, best...), true
	}
	var eventKeys [][]string
	collect(reflect.TypeOf(relay.EventSettings{}), nil, &eventKeys)
	if segs, ok := tryMap("events", eventKeys); ok {
		return segs, true
	}
	senderKeys := [][]string{{"type"}}
	seen := map[string]bool{}
	for _, mk := range senderTypes {
		var keys [][]string
		collect(reflect.TypeOf(mk(&Sender{})).Elem(), nil, &keys)
		for _, k := range keys {
			if s := strings.Join(k, "."); !seen[s] {
				seen[s] = true
				senderKeys = append(senderKeys, k)
			}
		}
	}
	return tryMap("senders", senderKeys)
}

// collect lists the value-taking keys of struct type t.
func collect(t reflect.Type, segs []string, out *[][]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == durationType {
		*out = append(*out, segs)
		return
	}
	for _, f := range keyFields(t) {
		collect(t.FieldByIndex(f.index).Type, appendSeg(segs, f.name), out)
	}
	for old, renamed := range renamedKeys[t] {
		if i, ok := fieldByKey(t, renamed); ok {
			collect(t.FieldByIndex(i).Type, appendSeg(segs, old), out)
		}
	}
}
