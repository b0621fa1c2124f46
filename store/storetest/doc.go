// Package storetest is the conformance suite every store dialect runs, in
// the spirit of River's riverdrivertest: one exported entry point,
// [Exercise], called by each dialect's tests with a [Harness] that opens
// drivers on isolated namespaces of the real database.
package storetest
