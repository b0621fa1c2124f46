// Package pertype holds one value per event type, created on first use.
// The dialects keep their claim cursors in it: hints held in memory, one
// per event type a driver claims.
package pertype

import "sync"

// Map holds one *T per event type. It is safe for concurrent use; the zero
// Map is ready to use.
type Map[T any] struct {
	mu sync.Mutex
	m  map[string]*T
}

// Get returns the value of eventType, creating a zero one on first use.
// Every call for one event type returns the same pointer.
func (m *Map[T]) Get(eventType string) *T {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]*T{}
	}
	v := m.m[eventType]
	if v == nil {
		v = new(T)
		m.m[eventType] = v
	}
	return v
}
