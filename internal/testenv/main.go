package testenv

// RunThen returns m, whose Run calls after once the tests have run. A
// package whose tests share a handle for the whole process (an admin
// *sql.DB opened once) passes RunThen(m, closeIt) to
// goleak.VerifyTestMain, so that the handle is closed before goleak looks
// for goroutines that outlived the tests and only real leaks are
// reported, without ignoring database/sql's goroutines everywhere.
func RunThen(m interface{ Run() int }, after func()) interface{ Run() int } {
	return runThen{m, after}
}

type runThen struct {
	m     interface{ Run() int }
	after func()
}

func (r runThen) Run() int {
	code := r.m.Run()
	r.after()
	return code
}
