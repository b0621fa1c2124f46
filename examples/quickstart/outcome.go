package main

import (
	"errors"
	"sync"

	"github.com/txbox/txbox"
)

// firstOutcome is a txbox.RelayHook that reports the first batch of eventType
// the destination answered for, acked or refused, and remembers the last
// error that opened a circuit: a destination or connection that does not
// answer at all produces no batch outcome, only a circuit that opens.
type firstOutcome struct {
	txbox.NopRelayHook
	eventType string
	done      chan txbox.BatchEvent

	mu      sync.Mutex
	circuit error
}

// OnBatch passes on the first batch that was acked, retried or failed;
// released batches (an outage, no attempt counted) are waited out.
func (o *firstOutcome) OnBatch(e txbox.BatchEvent) {
	if e.EventType != o.eventType || e.Sent+e.Retried+e.Failed == 0 {
		return
	}
	select {
	case o.done <- e:
	default:
	}
}

// OnCircuit keeps the error of the last circuit that opened.
func (o *firstOutcome) OnCircuit(e txbox.CircuitEvent) {
	if e.State != txbox.CircuitOpen || e.Err == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.circuit = e.Err
}

// circuitError says why nothing was delivered, as far as the circuits
// know.
func (o *firstOutcome) circuitError() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.circuit == nil {
		return errors.New("no answer from the destination, and no circuit opened")
	}
	return o.circuit
}
