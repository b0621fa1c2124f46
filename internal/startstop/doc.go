// Package startstop is the one lifecycle of txbox's long-running parts:
// the relay, its sources and background jobs, the inbox cleaner and the
// consumers.
//
// A part embeds a Lifetime and gives it its goroutines (Go) instead of a
// WaitGroup of its own. Begin starts the lifetime; End stops it in two
// steps:
//
//   - Run's context ends when End begins: nothing new is started (no
//     claim, no read), and what is in flight finishes;
//   - Hard's context ends when End's own context ends: in-flight work is
//     cut short, and End still waits for every goroutine before it
//     returns, so that no goroutine outlives Stop.
//
// Started and Stopped are closed when the lifetime began and when it
// ended, for a caller that waits on a part it did not stop itself.
//
// It follows River's startstop in spirit (a service with Start, Stop,
// Started and Stopped), with a Stop bounded by its context.
package startstop
