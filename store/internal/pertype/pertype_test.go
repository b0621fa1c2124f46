package pertype

import (
	"sync"
	"testing"
)

// TestGet: one value per event type, the same pointer for every caller,
// also when many goroutines ask for the first time at once.
func TestGet(t *testing.T) {
	var m Map[int]
	const goroutines = 16
	got := make([]*int, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = m.Get("a")
		}()
	}
	wg.Wait()
	for i, p := range got {
		if p != got[0] {
			t.Fatalf("goroutine %d got another value for the same type", i)
		}
	}
	if *got[0] != 0 {
		t.Fatalf("new value = %d, want the zero value", *got[0])
	}
	*got[0] = 7
	if b := m.Get("b"); b == got[0] || *b != 0 {
		t.Fatal("another type shares the first type's value")
	}
	if *m.Get("a") != 7 {
		t.Fatal("the value of a type did not persist")
	}
}
