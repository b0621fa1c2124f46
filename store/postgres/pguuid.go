package postgres

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// google/uuid.UUID is a driver.Valuer and an sql.Scanner, so pgx would
// send and read it as text: format 36 characters, parse them back. On the
// claim/finish hot path that was a third of the relay loop's client CPU.
// pgtype.UUID is the same 16 bytes in pgx's binary format.

func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return out
}

// uuidDest scans a uuid column straight into a uuid.UUID.
type uuidDest struct{ dst *uuid.UUID }

// ScanUUID implements pgtype.UUIDScanner.
func (u uuidDest) ScanUUID(v pgtype.UUID) error {
	*u.dst = v.Bytes
	return nil
}
