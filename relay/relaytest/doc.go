// Package relaytest holds what a test of code built on a relay needs to run
// one: Start builds, starts and, when the test ends, stops a relay.Relay, so
// that a test states its configuration and nothing of the lifecycle.
package relaytest
