// Command txbox runs the txbox relay and its companions.
//
//	txbox migrate  [--config txbox.yaml]   create or upgrade txbox's tables
//	txbox migrate get --dialect D --out DIR   write the migrations as files for goose / golang-migrate
//	txbox relay    [--config txbox.yaml]   deliver outbox rows until SIGTERM/SIGINT
//	txbox publish  --type T --payload P    insert one event from the shell
//	txbox status                           backlog, lag, attempts, last error per event type; dead-letter counts
//	txbox dlq list|show|parked|retry|resolve|delete   manage dead letters and parked keys
//	txbox demo     [--duration 10s]        the whole pipeline, nothing to install
//	txbox bench    [--scenario drain,...]  the relay against the naive loop and watermill (docs/benchmarks/bench-command.md)
//	txbox version                          print the build's version
//
// Every command takes --help. Configuration comes from a YAML file (see
// docs/configuration.md), overridden by TXBOX_* environment variables and
// then by --set key=value flags. `txbox relay` serves Prometheus metrics on
// metrics.listen and the /livez and /readyz probes on health.listen when
// they are set (docs/metrics.md, docs/operations.md).
//
// Exit codes: 0 success; 1 a failure while running (database or broker
// unreachable, graceful stop over its deadline, demo found a lost or
// unexpected event); 2 a usage or configuration error (bad flag, bad YAML,
// bad value), reported with the key's path.
package main
