package agenttest

import (
	"fmt"
	"runtime"
	"testing"
)

// Outcome runs fn, a use of a test helper, with a testing.TB whose Fatal
// and Skip end only fn's goroutine, and returns how it ended: "" when it
// ran through, the message for a failure, "skip: " and the message for a
// skip. It is for testing test helpers' bad paths.
func Outcome(t testing.TB, fn func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r.outcome
}

type recorder struct {
	testing.TB
	outcome string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.end(fmt.Sprintf(format, args...)) }
func (r *recorder) Fatal(args ...any)                 { r.end(fmt.Sprint(args...)) }
func (r *recorder) Skip(args ...any)                  { r.end("skip: " + fmt.Sprint(args...)) }

func (r *recorder) end(s string) {
	r.outcome = s
	runtime.Goexit()
}
