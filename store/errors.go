package store

import "errors"

// ErrInvalidParams is matched (errors.Is) by errors of seam calls whose
// parameters are out of range: a nil *Params, a claim Limit below 1, a
// non-positive lease, an unknown outcome, an unknown dead-letter status
// filter. The call changed nothing. Callers such as the admin API map it to
// a 4xx response; dialects wrap it (sqlite.ErrInvalidParams does).
var ErrInvalidParams = errors.New("store: invalid parameters")
