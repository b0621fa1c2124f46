package store

import "errors"

// ErrInvalidParams is matched (errors.Is) by errors of seam calls whose
// parameters are out of range: a nil *Params, a claim Limit below 1, a
// non-positive lease, an unknown outcome, an unknown dead-letter status
// filter. The call changed nothing. Callers such as the admin API map it to
// a 4xx response; dialects wrap it (sqlite.ErrInvalidParams does).
var ErrInvalidParams = errors.New("store: invalid parameters")

// ErrDataRefused is matched by errors of seam calls that the database
// refused because of the data itself: a value it cannot store, a check
// or NOT NULL constraint (SQLSTATE classes 22 and 23 on PostgreSQL, other
// than a duplicate id). Sending the same data again fails the same way,
// unlike a lost connection; a caller that writes many items at once
// (the stream's spill) splits them to find the one at fault.
var ErrDataRefused = errors.New("store: the database refused the data")
