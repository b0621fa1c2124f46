// Package walmsg is the encoding of one event in a logical decoding
// message (pg_logical_emit_message) of WAL mode: what the PostgreSQL
// driver's publisher and the txbox_emit SQL function write, and what the
// relay's stream decodes. docs/schema/postgres.md, "WAL mode messages",
// is the contract for producers in other languages.
//
// Version 1, all integers big-endian:
//
//	offset  size  field
//	0       1     version, 1
//	1       16    id (UUID bytes)
//	17      8     created_at, microseconds since the Unix epoch (int64)
//	25      8     not_before, microseconds since the Unix epoch; 0 = none
//	33      4     length of the type, then its UTF-8 bytes
//	        4     length of the key, then its bytes; 0 = no key
//	        4     length of the headers, then a JSON object of strings; 0 = none
//	        rest  payload
//
// A decoder rejects a message whose version it does not know, so a newer
// producer never has its events misread by an older relay.
package walmsg
