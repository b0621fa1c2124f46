package admin

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/txbox/txbox/store"
)

// Limits of the groups listing.
const (
	// DefaultGroupsPageSize is the groups of a page when no limit is
	// given; MaxGroupsPageSize the largest accepted (each group of a
	// page reads one payload preview).
	DefaultGroupsPageSize = 20
	MaxGroupsPageSize     = 100
	// groupPreviewBytes bounds each group's payload preview.
	groupPreviewBytes = 512
	// fingerprintBudget bounds the time a listing spends fingerprinting
	// the dead letters the relay has not fingerprinted yet (those stored
	// before fingerprints were, on a first listing); past it the listing
	// says it is incomplete, and the next one goes on.
	fingerprintBudget = 3 * time.Second
	fingerprintBatch  = 1000
)

// Group is a failure group as the API shows it.
type Group struct {
	// Fingerprint is the group's key: the filter.group of a bulk action
	// and the group parameter of a listing.
	Fingerprint string `json:"fingerprint"`
	Count       int64  `json:"count"`
	// FirstFailedAt and LastFailedAt are its oldest and newest failures.
	FirstFailedAt time.Time `json:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at"`
	// EventTypes and Destinations are those the group covers. A
	// fingerprint hashes both, so each holds one value today; they are
	// lists so that a coarser grouping can come without a wire change.
	EventTypes   []string `json:"event_types"`
	Destinations []string `json:"destinations"`
	// Class is the failure class (permanent, undecodable,
	// attempts_exhausted); Message the normalised error, the group's
	// title.
	Class   string `json:"class"`
	Message string `json:"message"`
	// Sample is the group's newest dead letter: its id, its error as the
	// destination wrote it, and a preview of its payload.
	Sample GroupSample `json:"sample"`
}

// GroupSample is a group's newest dead letter.
type GroupSample struct {
	ID      string  `json:"id"`
	Error   string  `json:"error"`
	Payload Payload `json:"payload"`
}

// GroupPage is a page of groups, largest first.
type GroupPage struct {
	Groups     []Group `json:"groups"`
	NextCursor string  `json:"next_cursor,omitempty"`
	// Complete is false when dead letters are still waiting for their
	// fingerprint (the listing fingerprints for a few seconds at most):
	// they are in no group yet, and listing again goes on.
	Complete bool `json:"complete"`
}

var groupsParams = map[string]bool{"status": true, "limit": true, "cursor": true}

func (h *Handler) deadLetterGroups(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var errs paramErrors
	checkParams(q, groupsParams, &errs)
	params := store.DeadLetterGroupsParams{Status: store.DeadLetterUnresolved, Limit: limitParam(q, DefaultGroupsPageSize, MaxGroupsPageSize, &errs)}
	switch strings.ToLower(q.Get("status")) {
	case "", "unresolved":
	case "resolved":
		params.Status = store.DeadLetterResolved
	case "all":
		params.Status = ""
	default:
		errs.add("status", "must be unresolved, resolved or all")
	}
	if v := q.Get("cursor"); v != "" {
		c, err := decodeGroupCursor(v)
		if err != nil {
			errs.add("cursor", "not a cursor returned by this API")
		}
		params.After = c
	}
	if err := errs.err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	complete, err := h.fingerprintPending(r.Context())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	want := params.Limit
	params.Limit++
	groups, err := h.cfg.Store.DeadLetterGroups(r.Context(), &params)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	page := GroupPage{Groups: []Group{}, Complete: complete}
	for i, g := range groups {
		if i == want {
			page.NextCursor = encodeGroupCursor(*groups[i-1].Cursor())
			break
		}
		out := Group{
			Fingerprint: g.Fingerprint, Count: g.Count, FirstFailedAt: g.FirstFailedAt.UTC(), LastFailedAt: g.LastFailedAt.UTC(),
			EventTypes: []string{g.EventType}, Destinations: []string{g.Destination}, Class: g.Class, Message: g.Message,
			Sample: GroupSample{ID: g.SampleID.String(), Error: g.SampleError},
		}
		// The preview of one payload, bounded: a group of a million
		// dead letters reads one.
		if dl, err := h.cfg.Store.DeadLetterGet(r.Context(), g.SampleID); err == nil {
			out.Sample.Payload = payloadView(dl, groupPreviewBytes)
		}
		page.Groups = append(page.Groups, out)
	}
	writeJSON(w, http.StatusOK, page)
}

// fingerprintPending fingerprints the dead letters that have none yet,
// for fingerprintBudget at most, and reports whether none is left.
func (h *Handler) fingerprintPending(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(fingerprintBudget)
	for time.Now().Before(deadline) {
		n, err := h.cfg.Store.DeadLetterFingerprint(ctx, &store.DeadLetterFingerprintParams{Limit: fingerprintBatch, Print: h.cfg.Fingerprinter})
		if err != nil {
			return false, err
		}
		if n < fingerprintBatch {
			return true, nil
		}
	}
	return false, nil
}

// A group cursor is base64url of the last group's count (8 bytes) and
// fingerprint (16 hex digits).
func encodeGroupCursor(c store.DeadLetterGroupCursor) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(c.Count))
	return base64.RawURLEncoding.EncodeToString(append(b, c.Fingerprint...))
}

func decodeGroupCursor(s string) (*store.DeadLetterGroupCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) != 8+store.FingerprintLen {
		return nil, errors.New("bad length")
	}
	c := &store.DeadLetterGroupCursor{Count: int64(binary.BigEndian.Uint64(b[:8])), Fingerprint: string(b[8:])}
	if c.Count < 1 || !store.ValidFingerprintKey(c.Fingerprint) {
		return nil, errors.New("bad cursor")
	}
	return c, nil
}
