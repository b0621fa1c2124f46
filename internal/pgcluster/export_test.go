package pgcluster

// Running reports whether a server runs on the data directory data.
func Running(data string) bool { return len(serverPIDs(data)) > 0 }

// RemoveStale removes what dead test processes left behind, as the
// first Start of a process does.
func RemoveStale() { removeStale(baseDir()) }
