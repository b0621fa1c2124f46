package txbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docsWording lists wording the pages must not use, each with why. The
// claim mode follows the sender (docs/concepts.md, "Claim modes"): `lock`
// for broker senders on PostgreSQL and MySQL/MariaDB, where a crashed
// relay's rows come back at once, and `lease` for webhooks, custom senders
// and SQLite, where they come back after the lease. A sentence about when
// rows come back after a crash is true of one mode only.
var docsWording = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`(?i)dupe-window 6m|window to 6m|window[^.]{0,60}at\s+least\s+as\s+long\s+as\s+the\s+lease`),
		"the 6-minute JetStream window was advice for the old lease default; see docs/sizing.md, \"Broker dedup windows\""},
	{regexp.MustCompile(`(?i)through (row )?leases|row leases`),
		"relays do not share the work through leases: broker senders claim with `lock` by default"},
	{regexp.MustCompile(`(?i)max-batch-processing-time`),
		"no such key: the lease is `lease`"},
	{regexp.MustCompile(`(?i)txbox-relay@`),
		"the systemd unit is not a template"},
	{regexp.MustCompile("(?i)(default|defaults to|by default)[^.|\\n]{0,20}`?lease`? claim|claim[^.|\\n]{0,20}default[^.|\\n]{0,10}`lease`"),
		"the claim defaults to `lock` for broker senders on PostgreSQL and MySQL/MariaDB"},
	{regexp.MustCompile(`(?i)retention[^.|\n]{0,30}default[^.|\n]{0,10}\b[1-9][0-9]*(s|m|h|d)\b`),
		"retention defaults to 0 (delete on ack)"},
}

// leaseRecovery matches wording about when a crashed relay's rows come
// back that holds for the `lease` claim only; claimMode matches a
// paragraph that says which claim mode it speaks of.
var (
	leaseRecovery = regexp.MustCompile(`(?i)lease\s+(expires|expired|ends|is\s+over|runs\s+out)|(after|when)\s+(the|their|its)\s+.?lease|wait(s|ing)?\s+(out\s+|for\s+)?(the\s+|their\s+|its\s+)?.?lease|up\s+to\s+(the|their|its)\s+.?lease|takes?\s+(it\s+)?over\s+(when|after)\s+the\s+lease|recovered\s+(when|after)\s+(the|their|its)\s+lease`)
	claimMode     = regexp.MustCompile("(?i)`?lock`?\\s+(claim|mode)|claim:\\s+?`?(lock|lease)|`?lease`?\\s+(claim|mode)|claim\\s+modes?|custom\\s+sender|webhook|sqlite")
)

// docPages returns the pages a newcomer reads: README.md and the text
// files under docs/, examples/ and deploy/ (Markdown, YAML, the systemd
// unit, shell scripts).
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md"}
	for _, dir := range []string{"docs", "examples", "deploy"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch filepath.Ext(path) {
			case ".md", ".yaml", ".yml", ".service", ".sh":
				pages = append(pages, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return pages
}

// paragraph is a run of non-blank lines and the line it starts on.
type paragraph struct {
	line int
	text string
}

func paragraphs(text string) []paragraph {
	var out []paragraph
	var cur []string
	start := 0
	for i, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" || strings.TrimSpace(line) == "#" {
			if len(cur) > 0 {
				out = append(out, paragraph{start, strings.Join(cur, "\n")})
				cur = nil
			}
			continue
		}
		if len(cur) == 0 {
			start = i + 1
		}
		cur = append(cur, line)
	}
	if len(cur) > 0 {
		out = append(out, paragraph{start, strings.Join(cur, "\n")})
	}
	return out
}

// lineOf returns the line number of offset off in p.
func (p paragraph) lineOf(off int) int {
	return p.line + strings.Count(p.text[:off], "\n")
}

// TestDocsMatchTheClaimDefaults keeps the pages true to the claim
// defaults: no paragraph says when a crashed relay's rows come back (after
// the lease) without saying which claim mode it speaks of, and no page uses
// wording that contradicts the defaults (docsWording). A failure names
// file:line.
func TestDocsMatchTheClaimDefaults(t *testing.T) {
	t.Parallel()
	for _, path := range docPages(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paragraphs(string(data)) {
			if loc := leaseRecovery.FindStringIndex(p.text); loc != nil && !claimMode.MatchString(p.text) {
				t.Errorf("%s:%d: %q says rows come back after the lease without naming the claim mode: true of the `lease` claim only, while broker senders on PostgreSQL and MySQL/MariaDB default to `lock` (docs/concepts.md, \"What a crash costs\")",
					path, p.lineOf(loc[0]), p.text[loc[0]:loc[1]])
			}
			for _, w := range docsWording {
				for _, loc := range w.re.FindAllStringIndex(p.text, -1) {
					t.Errorf("%s:%d: %q: %s", path, p.lineOf(loc[0]), p.text[loc[0]:loc[1]], w.why)
				}
			}
		}
	}
}

// TestDocsWordingCheckCatches feeds the check the wording it exists to
// catch, so that a pattern that stopped matching fails here.
func TestDocsWordingCheckCatches(t *testing.T) {
	t.Parallel()
	caught := func(text string) bool {
		for _, p := range paragraphs(text) {
			if leaseRecovery.MatchString(p.text) && !claimMode.MatchString(p.text) {
				return true
			}
			for _, w := range docsWording {
				if w.re.MatchString(p.text) {
					return true
				}
			}
		}
		return false
	}
	for _, bad := range []string{
		"Its batches in flight come back when\ntheir lease (15s in this example's txbox.yaml) ends.",
		"# A relay that dies holding a batch leaves it leased; another relay takes\n# it over when the lease ends.",
		"(its claimed rows are recovered when their lease expires) but delays\n# them by up to the lease.",
		"raise the stream's window to 6m or more (`nats stream edit STREAM\n--dupe-window 6m`)",
		"# once against the same database: they share the work through row leases.",
		"Rows it had claimed are re-delivered after\ntheir `lease` (5m) expires, without counting an attempt",
		"A relay killed before it released its rows delays them by up to the `lease`,\nnothing more.",
		"or txbox-relay@N instances",
		"Keep the stream's duplicate window (`--dupe-window`, 2 minutes by\ndefault) at least as long as the lease",
		"`retention` (default 24h) keeps processed rows",
		"By default the `lease` claim is used for NATS.",
	} {
		if !caught(bad) {
			t.Errorf("not caught: %q", bad)
		}
	}
	for _, good := range []string{
		"With the `lock` claim the rows come back at once; with the `lease` claim after their lease expires.",
		"A webhook's rows wait for the lease.",
		"`retention` (default 0: delete on ack) keeps processed rows",
	} {
		if caught(good) {
			t.Errorf("caught, although true: %q", good)
		}
	}
}
