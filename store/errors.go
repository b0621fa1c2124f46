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
// or NOT NULL constraint, a value too large for an index (SQLSTATE
// classes 22, 23 and 54 on PostgreSQL, other than a duplicate id).
// Sending the same data again fails the same way, unlike a lost
// connection; a caller that writes many items at once (the stream's
// spill) splits them to find the one at fault.
var ErrDataRefused = errors.New("store: the database refused the data")

// ErrConnectionLost is matched by errors of seam calls that lost their
// connection to the database, or reached a server that cannot take
// writes: the server shut down, crashed or is recovering (SQLSTATE
// 57P01, 57P02, 57P03, class 08, a network error or an unexpected EOF),
// or it is a standby or a demoted primary (25006,
// read_only_sql_transaction). A call that failed so may still have
// committed (its answer was lost). The driver that returns it has already
// dropped its pooled connections to that server, once per loss rather
// than once per error, so the next call dials afresh and a multi-host
// DSN finds the new primary: retry soon, and back off only while the
// fresh connections fail too (the relay's claims and stream do).
var ErrConnectionLost = errors.New("store: the connection to the database was lost")
