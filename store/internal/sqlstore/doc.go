// Package sqlstore holds what the database/sql dialects (store/mysql,
// store/sqlite) do alike, so that each dialect keeps only its SQL and the
// way it reads its own column types: the checks of an insert's events, the
// ordered claim's cursor, the dead-letter filter's WHERE clause, the
// collection of listed rows and which route rows a fan-out expansion or
// split makes (FanOut).
//
// The shapes are shared, never the SQL text: each dialect passes its own
// conditions and argument encoders (docs/schema/mysql.md,
// docs/schema/sqlite.md).
package sqlstore
