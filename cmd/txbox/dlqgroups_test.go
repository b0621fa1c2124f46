package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestDLQGroups: dlq groups fingerprints the dead letters (no relay has
// run) and lists their groups; --group retries exactly one group, paced
// by --rate with its progress on stderr; a bad fingerprint is a usage
// error.
func TestDLQGroups(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/groups.db"
	poison := deadLetters(t, db, "poison-pill", 3)
	other := deadLetters(t, db, "other-type", 2)
	dlq := func(args ...string) (int, string, string) {
		return runInProcess(t, nil, append([]string{"dlq", args[0], "--dsn", db}, args[1:]...)...)
	}
	code, out, errOut := dlq("groups", "--json")
	var gs []groupJSON
	if code != exitOK || json.Unmarshal([]byte(out), &gs) != nil || len(gs) != 2 {
		t.Fatalf("groups: %d %q %q", code, out, errOut)
	}
	if gs[0].Count != 3 || gs[0].EventType != "poison-pill" || gs[0].Message != "receiver said <n>: bad poison" || gs[1].Count != 2 {
		t.Fatalf("groups %+v", gs)
	}
	code, out, _ = dlq("groups")
	if code != exitOK || !strings.Contains(out, gs[0].Fingerprint) || !strings.Contains(out, "receiver said <n>: bad poison") {
		t.Fatalf("groups table: %d %q", code, out)
	}
	start := time.Now()
	code, out, errOut = dlq("retry", "--all", "--group", gs[0].Fingerprint, "--rate", "4")
	if code != exitOK || !strings.Contains(out, "retried 3 of 3") || !strings.Contains(errOut, "3 of 3 done") {
		t.Fatalf("group retry: %d %q %q", code, out, errOut)
	}
	// 3 at 4 per second in pages of 4: one page, so no wait; a rate of 1
	// paces pages of one.
	code, out, errOut = dlq("resolve", "--all", "--group", gs[1].Fingerprint, "--rate", "1")
	if code != exitOK || !strings.Contains(out, "resolved 2 of 2") || !strings.Contains(errOut, "1 of 2 done") || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("paced resolve: %d %q %q after %s", code, out, errOut, time.Since(start))
	}
	code, out, _ = dlq("list", "--status", "all", "--json")
	for _, id := range poison {
		if strings.Contains(out, id.String()) {
			t.Errorf("%s of the retried group is still dead-lettered", id)
		}
	}
	for _, id := range other {
		if !strings.Contains(out, id.String()) {
			t.Errorf("%s of the other group is gone", id)
		}
	}
	if code, _, errOut = dlq("retry", "--all", "--group", "NOPE"); code != exitUsage || !strings.Contains(errOut, "--group") {
		t.Errorf("bad group: %d %q", code, errOut)
	}
}
