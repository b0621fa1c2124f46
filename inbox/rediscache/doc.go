// Package rediscache is an inbox.Cache on Redis (go-redis v9), shared by
// every process of a consumer, in front of the inbox table.
//
// Keys are "<Namespace>:<consumer>:<event id>" with a TTL, written only
// after the inbox table row committed. Redis is an optimisation: when it is
// down, flushed or evicts keys, the inbox asks the table, which stays the
// source of truth, so the cost of losing Redis is one table lookup per
// message, never a second effect.
//
// It lives in its own package so that package inbox does not depend on
// go-redis.
package rediscache
