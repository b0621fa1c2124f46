package main

import "os"

// isTerminal reports whether f is a character device (a terminal), without
// a dependency: live progress redraws there, plain lines elsewhere.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	if err != nil {
		return false
	}
	return st.Mode()&os.ModeCharDevice != 0
}
