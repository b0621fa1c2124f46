// Package keydoc generates the key tables of docs/configuration.md from
// the code: each key's default is read from a configuration loaded with
// nothing set (config.Config.Settings, which shows the value the relay
// uses), and its meaning from the tables in tables.go. A key the code has
// and the tables lack, or the reverse, is an error, so the page cannot
// drift from the code. Run `go run ./config/internal/gendocs` after
// changing a key or a default.
package keydoc

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/txbox/txbox/config"
)

// Command regenerates docs/configuration.md; error messages name it.
const Command = "go run ./config/internal/gendocs"

// row documents one key, or a few keys that share a row.
type row struct {
	// keys are the key paths under the table's prefix; the first one's
	// default fills the default column unless def is set.
	keys []string
	// def, when set, replaces the computed default; "%v" in it stands for
	// the computed one, in backquotes.
	def string
	// meaning is the last column (Markdown).
	meaning string
}

// table is one generated table: the rows of the keys under prefix.
type table struct {
	// name marks the table in the page: <!-- keys:name --> … <!-- /keys -->.
	name string
	// prefix is the key path of the section (database, defaults,
	// senders.nats, ...).
	prefix string
	rows   []row
	// groups, for the senders table, are the rows of each sender type;
	// the table then has a type column.
	groups []group
}

// group is the rows of one sender type in the senders table.
type group struct {
	typ  string
	rows []row
}

var block = regexp.MustCompile(`(?s)<!-- keys:([a-z-]+) -->\n.*?<!-- /keys -->`)

// sample is the configuration whose settings give the defaults: nothing
// set but one sender of each type, named after its type, with the keys a
// sender requires.
const sample = `
senders:
  nats: { type: nats }
  webhook: { type: webhook }
  kafka: { type: kafka, brokers: [host:9092] }
  rabbitmq: { type: rabbitmq, url: "amqp://host/" }
  redis: { type: redis }
defaults: { sender: nats }
`

// requiredInSample are the keys sample sets only because they are
// required: their default column says so instead.
var requiredInSample = map[string]bool{"senders.kafka.brokers": true, "senders.rabbitmq.url": true, "defaults.sender": true}

// Render returns page with every generated table replaced by the one the
// code gives, and an error naming the keys documented in one place only
// (the page is then incomplete and must not be written).
func Render(page []byte) ([]byte, error) {
	c, err := config.Load(config.Source{Name: "sample", YAML: []byte(sample)})
	if err != nil {
		return nil, fmt.Errorf("keydoc: load the sample: %w", err)
	}
	values := map[string]string{}
	for _, s := range c.Settings() {
		values[s.Path] = s.Value
	}
	used := map[string]bool{}
	var errs []string
	found := map[string]bool{}
	out := block.ReplaceAllFunc(page, func(m []byte) []byte {
		name := string(block.FindSubmatch(m)[1])
		t, ok := tableNamed(name)
		if !ok {
			errs = append(errs, fmt.Sprintf("the page marks a table %q that keydoc does not have", name))
			return m
		}
		found[name] = true
		var b bytes.Buffer
		fmt.Fprintf(&b, "<!-- keys:%s -->\n", name)
		if t.groups != nil {
			b.WriteString("| type | key | default | meaning |\n|---|---|---|---|\n")
			b.WriteString("| all | `type` | required | `" + strings.Join(config.SenderTypes(), "`, `") + "` |\n")
			for _, g := range t.groups {
				for i, r := range g.rows {
					typ := "|"
					if i == 0 {
						typ = "| `" + g.typ + "`"
					}
					b.WriteString(typ + " " + t.cell(join("senders."+g.typ, r), r, values, used, &errs) + "\n")
				}
			}
		} else {
			b.WriteString("| key | default | meaning |\n|---|---|---|\n")
			for _, r := range t.rows {
				b.WriteString(t.cell(join(t.prefix, r), r, values, used, &errs) + "\n")
			}
		}
		b.WriteString("<!-- /keys -->")
		return b.Bytes()
	})
	for _, t := range tables {
		if !found[t.name] {
			errs = append(errs, fmt.Sprintf("the page has no <!-- keys:%s --> table", t.name))
		}
	}
	var missing []string
	for p := range values {
		// senders.<name>.type is the table's "all" row.
		if !used[p] && !(strings.HasPrefix(p, "senders.") && strings.HasSuffix(p, ".type")) {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		errs = append(errs, fmt.Sprintf("keys without a row in config/internal/keydoc/tables.go: %s", strings.Join(missing, ", ")))
	}
	if len(errs) > 0 {
		// The page as far as it could be rendered, for a look; not to
		// be written.
		return out, fmt.Errorf("keydoc: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

func tableNamed(name string) (table, bool) {
	for _, t := range tables {
		if t.name == name {
			return t, true
		}
	}
	return table{}, false
}

// join returns the full key paths of r under prefix.
func join(prefix string, r row) []string {
	out := make([]string, len(r.keys))
	for i, k := range r.keys {
		out[i] = k
		if prefix != "" {
			// A table of top-level keys (tenants) has no prefix.
			out[i] = prefix + "." + k
		}
	}
	return out
}

// cell renders the key, default and meaning columns of r.
func (t table) cell(paths []string, r row, values map[string]string, used map[string]bool, errs *[]string) string {
	keys := make([]string, len(r.keys))
	for i, k := range r.keys {
		keys[i] = "`" + k + "`"
		if _, ok := values[paths[i]]; !ok {
			*errs = append(*errs, fmt.Sprintf("tables.go documents %s, which the code does not have", paths[i]))
		}
		used[paths[i]] = true
	}
	v := formatDefault(values[paths[0]])
	switch {
	case r.def != "":
		v = strings.ReplaceAll(r.def, "%v", v)
	case requiredInSample[paths[0]]:
		v = "required"
	}
	meaning := " "
	if r.meaning != "" {
		meaning = " " + r.meaning + " "
	}
	return "| " + strings.Join(keys, ", ") + " | " + v + " |" + meaning + "|"
}

var duration = regexp.MustCompile(`^(\d+h)?(\d+m)?(\d+(?:\.\d+)?(?:s|ms|µs))$`)

// formatDefault writes a value of config print the way the page does:
// durations without their zero minutes and seconds (1m, 168h), no value
// as "—".
func formatDefault(v string) string {
	switch v {
	case `""`, "[]", "{}", "(unset)", "":
		return "—"
	}
	if m := duration.FindStringSubmatch(v); m != nil {
		d := m[1] + m[2] + m[3]
		if m[1] != "" || m[2] != "" {
			d = strings.TrimSuffix(d, "0s")
		}
		if m[1] != "" {
			d = strings.TrimSuffix(d, "0m")
		}
		if d == "0s" {
			d = "0"
		}
		v = d
	}
	return "`" + v + "`"
}
