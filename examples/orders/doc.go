// Package orders holds the orders example system's end-to-end test; the
// system itself is the commands below it: producer (the order service),
// consumer (the analytics service) and loadgen (the traffic generator),
// with txbox.yaml for the relay between them. See README.md.
package orders
