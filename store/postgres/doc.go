// Package postgres is txbox's PostgreSQL store, built on jackc/pgx v5.
//
// [New] wraps a *pgxpool.Pool the caller owns. [Driver.Migrate] applies the
// embedded, versioned migrations under a transaction advisory lock, so
// instances starting together are safe. [Migrations] returns the same SQL,
// each step with its revert, for goose, golang-migrate or atlas users
// (`txbox migrate get` writes it as files).
//
// Publishing joins the caller's transaction: [Driver.OutboxInsert] accepts a
// pgx.Tx, a *sql.Tx (pgx's stdlib driver, lib/pq, ...) or any ORM
// transaction with ExecContext and Commit methods. One event is one INSERT
// ... VALUES, a batch one INSERT ... SELECT FROM unnest(arrays), and a
// large batch through a pgx transaction is a COPY; statement texts never
// change, so the server's prepared statements are reused. The insert
// issues pg_notify per event type, which PostgreSQL delivers only when the
// transaction commits; [Driver.OutboxListen] listens on a dedicated
// connection and wakes the relay.
//
// The relay's hot path is one statement per step: the claim is a CTE that
// selects due PENDING rows ORDER BY due_at, id LIMIT n FOR UPDATE SKIP
// LOCKED and marks them IN_PROCESS with a fresh lease token; the finish
// applies every outcome of a batch from unnest'ed arrays, fenced by the
// lease token. Partial indexes keep the claim O(batch) however large the
// processed history grows, and a per-type keyset lower bound keeps it so
// while a long transaction elsewhere stops vacuum (Config.ClaimLookback);
// see docs/schema/postgres.md for the plans.
//
// Every timestamp comes from the database clock (now()).
package postgres
