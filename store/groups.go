package store

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
)

// NotSentPrefix starts the last error of every row the relay dead-letters
// without sending it: a row that cannot be turned into a message, a
// WAL-mode event that did not decode, an event the database refused as it
// was. FailureClassOf reads it to tell FailureUndecodable from the
// failures of a destination, so the relay writes these texts with it and
// nothing else does.
const NotSentPrefix = "not sent: "

// MaxDestinationRunes bounds the destination a fingerprint stores, in
// runes (MySQL sizes the column in characters). A route longer than that
// (a webhook URL with a long query) is cut: the head names it.
const MaxDestinationRunes = 255

// FingerprintLen is the length of a fingerprint key (Fingerprint.Key): 16
// lower-case hex digits.
const FingerprintLen = 16

// FailureClassOf returns the failure class of a dead letter from what its
// row records: its last error and its attempts, and maxAttempts, the
// max-attempts of its type (0 when unknown).
//
//   - A last error that starts with NotSentPrefix: FailureUndecodable.
//   - Fewer attempts than max-attempts: FailurePermanent (the relay gave
//     up before the attempts ran out, which only a permanent error does).
//   - Otherwise FailureAttemptsExhausted. The rows record no more than
//     this, so a poison message (transient errors that counted) is
//     classed with the rejections: FailurePoison is never returned yet,
//     and with max-attempts 1 a permanent error is classed as exhausted.
//
// With maxAttempts unknown, one attempt counts as permanent and more as
// exhausted.
func FailureClassOf(lastError string, attempts, maxAttempts int) string {
	switch {
	case strings.HasPrefix(lastError, NotSentPrefix):
		return FailureUndecodable
	case maxAttempts > 0 && attempts < maxAttempts:
		return FailurePermanent
	case maxAttempts <= 0 && attempts <= 1:
		return FailurePermanent
	}
	return FailureAttemptsExhausted
}

// FingerprintInput is what DeadLetterFingerprint reads of a dead letter
// to fingerprint it.
type FingerprintInput struct {
	ID        txbox.ID
	EventType string
	// Route is the dead letter's route (DeadLetter.Route), "" for a type
	// with one route.
	Route     string
	Attempts  int
	LastError string
}

// Fingerprinter returns the fingerprint of a dead letter. The relay's
// (relay.Config.Fingerprinter) knows each type's destination and
// max-attempts; BasicFingerprinter knows neither.
type Fingerprinter func(in *FingerprintInput) Fingerprint

// BasicFingerprinter fingerprints a dead letter with no destination and
// the class FailureClassOf gives with max-attempts unknown: for tools
// that have no relay configuration.
func BasicFingerprinter(in *FingerprintInput) Fingerprint {
	return NewFingerprint("", in.EventType, FailureClassOf(in.LastError, in.Attempts, 0), in.LastError)
}

// StoredFingerprint is a fingerprint as DeadLetterFingerprint writes it:
// its fields clipped to what the columns hold, and its key.
type StoredFingerprint struct {
	ID          txbox.ID
	Key         string
	Destination string
	Class       string
	Message     string
}

// Stored returns f as written for the dead letter id: the destination cut
// to MaxDestinationRunes (the key hashes the whole of it).
func (f Fingerprint) Stored(id txbox.ID) StoredFingerprint {
	return StoredFingerprint{ID: id, Key: f.Key(), Destination: clipRunes(f.Destination, MaxDestinationRunes), Class: f.Class, Message: f.Message}
}

func clipRunes(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// DeadLetterFingerprintParams are the parameters of
// DeadLetters.DeadLetterFingerprint.
type DeadLetterFingerprintParams struct {
	// Limit bounds the dead letters one call fingerprints.
	Limit int
	// Print computes each fingerprint. Nil uses BasicFingerprinter.
	Print Fingerprinter
}

// Printer returns p.Print, or BasicFingerprinter when it is nil.
func (p *DeadLetterFingerprintParams) Printer() Fingerprinter {
	if p.Print == nil {
		return BasicFingerprinter
	}
	return p.Print
}

// DeadLetterGroup is a failure group: the dead letters that share a
// fingerprint.
type DeadLetterGroup struct {
	// Fingerprint is the group's key (Fingerprint.Key).
	Fingerprint string
	// EventType, Destination, Class and Message are what the key hashes
	// (the destination as stored, MaxDestinationRunes at most): every
	// dead letter of the group has the same.
	EventType   string
	Destination string
	Class       string
	Message     string
	// Count counts the group's dead letters; FirstFailedAt and
	// LastFailedAt are its oldest and newest failure times.
	Count         int64
	FirstFailedAt time.Time
	LastFailedAt  time.Time
	// SampleID is the group's newest dead letter, SampleError its last
	// error as the destination wrote it.
	SampleID    txbox.ID
	SampleError string
}

// Cursor is the listing position of g: a page that starts after it starts
// with the next group.
func (g *DeadLetterGroup) Cursor() *DeadLetterGroupCursor {
	return &DeadLetterGroupCursor{Count: g.Count, Fingerprint: g.Fingerprint}
}

// DeadLetterGroupCursor positions a page of groups (count desc,
// fingerprint desc).
type DeadLetterGroupCursor struct {
	Count       int64
	Fingerprint string
}

// DeadLetterGroupsParams are the parameters of DeadLetters.DeadLetterGroups.
type DeadLetterGroupsParams struct {
	// Status, when set, counts only the dead letters in it
	// (DeadLetterUnresolved or DeadLetterResolved).
	Status string
	// After is the cursor: the last group of the previous page. Nil
	// starts at the largest.
	After *DeadLetterGroupCursor
	Limit int
}

// MaxGroupsPage is the most groups one DeadLetterGroups call returns.
const MaxGroupsPage = 500

// Validate checks p: a known status, a Limit from 1 to MaxGroupsPage and
// a cursor with a well-formed fingerprint. It returns an error matching
// ErrInvalidParams.
func (p *DeadLetterGroupsParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: dead-letter groups: no parameters", ErrInvalidParams)
	}
	switch p.Status {
	case "", DeadLetterUnresolved, DeadLetterResolved:
	default:
		return &FilterError{"Status", fmt.Sprintf("%q must be %s or %s", p.Status, DeadLetterUnresolved, DeadLetterResolved)}
	}
	if p.Limit < 1 || p.Limit > MaxGroupsPage {
		return fmt.Errorf("%w: dead-letter groups: Limit %d is outside 1 to %d", ErrInvalidParams, p.Limit, MaxGroupsPage)
	}
	if p.After != nil && !ValidFingerprintKey(p.After.Fingerprint) {
		return &FilterError{"After.Fingerprint", "not a fingerprint key (16 lower-case hex digits)"}
	}
	return nil
}

// ValidFingerprintKey reports whether s has the form of Fingerprint.Key.
func ValidFingerprintKey(s string) bool {
	if len(s) != FingerprintLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
