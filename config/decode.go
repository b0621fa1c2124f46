package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"

	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/redisstream"
	"github.com/txbox/txbox/sender/webhook"
)

// maxNodes bounds the work of walking one document, aliases included, so a
// hostile file (a "billion laughs" alias bomb) fails fast instead of
// exhausting memory.
const maxNodes = 100_000

var durationType = reflect.TypeOf(time.Duration(0))

// decoder walks a yaml.Node tree and a Go value together, so every error
// names the key path that caused it. It collects errors instead of stopping
// at the first, so one run shows every mistake in a file.
type decoder struct {
	// sources maps a key path to where an override came from (an
	// environment variable or a flag), for error messages.
	sources map[string]string
	file    string
	// lines maps each key path seen in the file to its line, so errors
	// found after decoding (validation) still point into the file.
	lines map[string]int
	errs  []*Error
	nodes int
	// renamed maps the key path of a renamed key to the deprecated path
	// the file used for it (renamedKeys), so that errors found after
	// decoding name the key the user wrote.
	renamed map[string]string
}

func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	if old, ok := d.renamed[path]; ok {
		path = old
	}
	e := &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
	if src, ok := d.sources[path]; ok {
		e.Source = src
	} else if n != nil && n.Line > 0 {
		e.Source = d.file
		e.Line = n.Line
	} else if line := d.lineOf(path); line > 0 {
		e.Source = d.file
		e.Line = line
	}
	d.errs = append(d.errs, e)
}

// lineOf returns the line of path, or of its nearest ancestor that is in
// the file (an inherited value is reported where the entry is), or 0.
func (d *decoder) lineOf(path string) int {
	for p := path; p != ""; {
		if line, ok := d.lines[p]; ok {
			return line
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

func (d *decoder) seen(path string, key *yaml.Node) {
	if d.lines == nil {
		d.lines = map[string]int{}
	}
	if key != nil && key.Line > 0 {
		d.lines[path] = key.Line
	}
}

// join appends key to path with a dot. A key that itself contains a dot
// or a bracket (an event type such as "order.created") is bracketed and
// quoted, so the path stays unambiguous: events["order.created"].batch-size
// (docs/configuration.md, "Strictness").
func join(path, key string) string {
	if strings.ContainsAny(key, ".[]") {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	}
	return "an unexpected node"
}

// fieldByKey returns the index path of the struct field whose key is key.
func fieldByKey(t reflect.Type, key string) ([]int, bool) {
	for _, f := range keyFields(t) {
		if f.name == key {
			return f.index, true
		}
	}
	return nil, false
}

// keyField is a struct field that holds a key: the key, the field's Go
// name and its index path, which goes through the structs embedded inline
// (SenderFormat).
type keyField struct {
	name   string
	goName string
	index  []int
}

// keyFields lists the keys of struct type t in field order (keyOf), those
// of an inline embedded struct in its place. Every walk over the keys of
// a struct (decoding, listing, explaining) goes through it.
func keyFields(t reflect.Type) []keyField {
	var out []keyField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if _, opts, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.Anonymous && (opts == "inline" || keys[t][f.Name] == inlineKey) {
			for _, sub := range keyFields(f.Type) {
				out = append(out, keyField{sub.name, sub.goName, append([]int{i}, sub.index...)})
			}
			continue
		}
		if name := keyOf(t, f); name != "" {
			out = append(out, keyField{name, f.Name, []int{i}})
		}
	}
	return out
}

// mappingPairs checks that n is a mapping with unique scalar keys and
// returns its key/value pairs.
func (d *decoder) mappingPairs(path string, n *yaml.Node) ([][2]*yaml.Node, bool) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "must be a mapping, not %s", kindName(n))
		return nil, false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	pairs := make([][2]*yaml.Node, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			d.fail(path, n.Content[i], "keys must be plain strings")
			continue
		}
		if seen[k.Value] {
			d.fail(join(path, k.Value), k, "duplicate key")
			continue
		}
		seen[k.Value] = true
		d.seen(join(path, k.Value), k)
		pairs = append(pairs, [2]*yaml.Node{k, v})
	}
	return pairs, true
}

// decode stores n into v (addressable), reporting problems under path.
func (d *decoder) decode(path string, n *yaml.Node, v reflect.Value) {
	d.nodes++
	if d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.fail(path, n, "document too large or too deeply aliased")
		}
		return
	}
	n = resolve(n)
	if n == nil || n.Kind == yaml.AliasNode {
		d.fail(path, n, "alias cycle")
		return
	}
	if isNull(n) {
		// An explicit null (or an empty value) leaves the key unset, so
		// it keeps its default or inherits.
		return
	}
	if u, ok := v.Addr().Interface().(nodeDecoder); ok {
		u.decodeNode(d, path, n)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(path, n, v.Elem())
	case reflect.Struct:
		d.decodeStruct(path, n, v)
	case reflect.Map:
		pairs, ok := d.mappingPairs(path, n)
		if !ok {
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for _, p := range pairs {
			elem := reflect.New(v.Type().Elem()).Elem()
			if old := v.MapIndex(reflect.ValueOf(p[0].Value)); old.IsValid() {
				elem.Set(old)
			}
			d.decode(join(path, p[0].Value), p[1], elem)
			v.SetMapIndex(reflect.ValueOf(p[0].Value), elem)
		}
	case reflect.Slice:
		d.decodeSlice(path, n, v)
	default:
		d.decodeScalar(path, n, v)
	}
}

func (d *decoder) decodeStruct(path string, n *yaml.Node, v reflect.Value) {
	pairs, ok := d.mappingPairs(path, n)
	if !ok {
		return
	}
	for _, p := range pairs {
		key := p[0].Value
		if renamed, ok := renamedKeys[v.Type()][key]; ok {
			if slices.ContainsFunc(pairs, func(q [2]*yaml.Node) bool { return q[0].Value == renamed }) {
				d.fail(join(path, key), p[0], "is the deprecated name of %s, which is also set: keep only %s", join(path, renamed), join(path, renamed))
				continue
			}
			if d.renamed == nil {
				d.renamed = map[string]string{}
			}
			d.renamed[join(path, renamed)] = join(path, key)
			key = renamed
		}
		i, ok := fieldByKey(v.Type(), key)
		if msg := literalSecret(key, keysOf(v.Type())); !ok && msg != "" {
			d.fail(join(path, key), p[0], "%s", msg)
			continue
		}
		if !ok {
			d.fail(join(path, key), p[0], "unknown key (valid keys: %s)", strings.Join(keysOf(v.Type()), ", "))
			continue
		}
		d.decode(join(path, p[0].Value), p[1], v.FieldByIndex(i))
	}
}

// renamedKeys are the keys a release renamed, for each struct type that
// holds them: the old key to the new one. A file, an environment variable
// or a --set flag may still use the old key for one release
// (docs/upgrading.md, "Deprecated in this release"); it decodes into the
// new key's field, and setting both in one mapping is an error naming
// both. The old keys are not listed by config print nor documented in
// docs/configuration.md's tables.
var renamedKeys = map[reflect.Type]map[string]string{
	reflect.TypeFor[relay.EventSettings](): {"ordering-fence": "commit-horizon"},
	reflect.TypeFor[Health]():              {"fence-threshold": "horizon-threshold"},
}

func keysOf(t reflect.Type) []string {
	var keys []string
	for _, f := range keyFields(t) {
		keys = append(keys, f.name)
	}
	return keys
}

func (d *decoder) decodeSlice(path string, n *yaml.Node, v reflect.Value) {
	var items []*yaml.Node
	switch n.Kind {
	case yaml.SequenceNode:
		items = n.Content
	case yaml.ScalarNode:
		// A scalar is a comma-separated list: this is how environment
		// variables and flags give lists ("a:9092,b:9092").
		for _, s := range strings.Split(n.Value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Line: n.Line})
			}
		}
	default:
		d.fail(path, n, "must be a list, not %s", kindName(n))
		return
	}
	out := reflect.MakeSlice(v.Type(), 0, len(items))
	for i, it := range items {
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(fmt.Sprintf("%s[%d]", path, i), it, elem)
		out = reflect.Append(out, elem)
	}
	v.Set(out)
}

func (d *decoder) decodeScalar(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n, "must be a single value, not %s", kindName(n))
		return
	}
	s := n.Value
	switch {
	case v.Type() == durationType:
		dur, err := parseDuration(s)
		if err != nil {
			d.fail(path, n, "%v", err)
			return
		}
		v.SetInt(int64(dur))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
		if err != nil || (v.Kind() == reflect.Int && (i > math.MaxInt32 || i < math.MinInt32)) {
			d.fail(path, n, "must be an integer, not %q", clip(s))
			return
		}
		v.SetInt(i)
	case v.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(path, n, "must be a number, not %q", clip(s))
			return
		}
		v.SetFloat(f)
	case v.Kind() == reflect.Bool:
		switch s {
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			d.fail(path, n, "must be true or false, not %q", clip(s))
		}
	default:
		d.fail(path, n, "unsupported value type %s", v.Type())
	}
}

// parseDuration accepts Go duration syntax with a unit on every number
// ("250ms", "1h30m", "0s") and the bare "0". A number without a unit is
// rejected rather than guessed as seconds or nanoseconds.
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("must be a duration such as 250ms, 10s or 1h30m, not %q", clip(s))
	}
	if dur < 0 {
		return 0, fmt.Errorf("must not be negative, got %q", clip(s))
	}
	return dur, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// nodeDecoder is implemented by types that decode themselves, such as
// Sender, whose valid keys depend on its type.
type nodeDecoder interface {
	decodeNode(d *decoder, path string, n *yaml.Node)
}

// senderTypes maps a sender type to a constructor of its settings with the
// defaults filled in.
var senderTypes = map[string]func(s *Sender) any{
	// Each sender starts from its package's defaults, so that `txbox
	// config print` shows the values the sender will use and the
	// defaults have one source: the sender package's Default* constants.
	SenderNATS: func(s *Sender) any {
		s.NATS = &NATSSender{URL: natsgo.DefaultURL, Name: nats.DefaultName, Timeout: nats.DefaultAckTimeout,
			MaxPending: nats.DefaultMaxPending, ProvisionStream: nats.DefaultProvisionStream}
		return s.NATS
	},
	SenderWebhook: func(s *Sender) any {
		s.Webhook = &WebhookSender{Timeout: webhook.DefaultTimeout, Concurrency: webhook.DefaultMaxConcurrency,
			ContentType: webhook.DefaultContentType, SignatureHeader: webhook.DefaultSignatureHeader}
		return s.Webhook
	},
	SenderKafka: func(s *Sender) any {
		s.Kafka = &KafkaSender{ClientID: kafka.DefaultClientID, Timeout: kafka.DefaultDeliveryTimeout,
			Linger: kafka.DefaultLinger, MaxBufferedRecords: kafka.DefaultMaxBufferedRecords, MaxRecordBytes: kafka.DefaultMaxRecordBytes}
		return s.Kafka
	},
	SenderRabbitMQ: func(s *Sender) any {
		s.RabbitMQ = &RabbitMQSender{Timeout: rabbitmq.DefaultConfirmTimeout, Channels: rabbitmq.DefaultChannels,
			ProvisionExchangeType: rabbitmq.DefaultProvisionExchangeType}
		return s.RabbitMQ
	},
	SenderRedis: func(s *Sender) any {
		s.Redis = &RedisSender{Addr: redisstream.DefaultAddr, Timeout: DefaultSenderTimeout, PoolSize: redisstream.DefaultPoolSize}
		return s.Redis
	},
}

// SenderTypes lists the accepted sender types, sorted.
func SenderTypes() []string {
	return []string{SenderKafka, SenderNATS, SenderRabbitMQ, SenderRedis, SenderWebhook}
}

func (s *Sender) decodeNode(d *decoder, path string, n *yaml.Node) {
	pairs, ok := d.mappingPairs(path, n)
	if !ok {
		return
	}
	var typeNode *yaml.Node
	for _, p := range pairs {
		if p[0].Value == "type" {
			typeNode = p[1]
		}
	}
	if typeNode == nil || isNull(typeNode) || typeNode.Kind != yaml.ScalarNode || typeNode.Value == "" {
		d.fail(join(path, "type"), n, "required: one of %s", strings.Join(SenderTypes(), ", "))
		return
	}
	mk, ok := senderTypes[typeNode.Value]
	if !ok {
		d.fail(join(path, "type"), typeNode, "unknown sender type %q (valid: %s)", clip(typeNode.Value), strings.Join(SenderTypes(), ", "))
		return
	}
	s.Type = typeNode.Value
	settings := reflect.ValueOf(mk(s)).Elem()
	for _, p := range pairs {
		key := p[0].Value
		if key == "type" {
			continue
		}
		i, ok := fieldByKey(settings.Type(), key)
		if msg := literalSecret(key, keysOf(settings.Type())); !ok && msg != "" {
			d.fail(join(path, key), p[0], "%s", msg)
			continue
		}
		if !ok {
			d.fail(join(path, key), p[0], "unknown key for sender type %s (valid keys: type, %s)", s.Type, strings.Join(keysOf(settings.Type()), ", "))
			continue
		}
		d.decode(join(path, key), p[1], settings.FieldByIndex(i))
	}
}
