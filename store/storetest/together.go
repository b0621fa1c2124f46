package storetest

import (
	"sync"
	"testing"
)

// together runs f(0) to f(n-1) on n goroutines released at the same
// moment, waits for all of them and fails t with the errors they
// returned: the races the suite provokes need their contenders to start
// together.
func together(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := f(i); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
