package testenv

import (
	"bytes"
	"sync"
)

// LogBuffer is a bytes.Buffer that is safe for concurrent use: the writer
// of a slog handler that goroutines log to while the test reads what was
// logged, or of a child process's output.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
