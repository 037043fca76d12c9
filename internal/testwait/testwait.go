// Package testwait bounds the waits of this repository's tests. Every wait
// has a deadline of its own ([Limit]); one that gives up says what it waited
// for and shows why it did not come: this process's goroutines for an
// in-process wait, a child's goroutines (SIGQUIT makes the Go runtime print
// them to its stderr) for a child process.
//
// The helpers that fail the test (Recv, Group, Until) call t.Fatalf: call
// them from the test's goroutine.
package testwait

import (
	"fmt"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Max is the longest a single wait may take: far more than anything a test
// of this repository waits for takes on a loaded 2-core machine under the
// race detector, far less than go test's default timeout (10 min).
const Max = 3 * time.Minute

// QuitGrace is how long a child process sent SIGQUIT gets to print its
// goroutines and exit before it is sent SIGKILL.
const QuitGrace = 10 * time.Second

// Limit returns how long a wait of t may take: Max, or less so that it gives
// up (and reports) well before t's deadline (go test -timeout), when that is
// nearer. It is at least a second.
func Limit(t testing.TB) time.Duration {
	d := Max
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := dt.Deadline(); ok {
			left := time.Until(dl)
			// Room for the report, and for a child's SIGQUIT grace.
			d = min(d, left-max(left/10, QuitGrace+5*time.Second))
		}
	}
	return max(d, time.Second)
}

// Goroutines returns the stacks of this process's goroutines
// (runtime/pprof's "goroutine" profile, debug=2).
func Goroutines() string {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		return "goroutine dump: " + err.Error()
	}
	return b.String()
}

// Recv returns the next value from ch, waiting Limit(t) at most; then it
// fails t, naming what (formatted with args) and dumping the goroutines.
func Recv[T any](t testing.TB, ch <-chan T, what string, args ...any) T {
	t.Helper()
	d := Limit(t)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("gave up after %s waiting for %s; goroutines:\n%s", d, fmt.Sprintf(what, args...), Goroutines())
	}
	var zero T
	return zero
}

// Group waits for wg, Limit(t) at most; then it fails t, naming what
// (formatted with args) and dumping the goroutines.
func Group(t testing.TB, wg *sync.WaitGroup, what string, args ...any) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	Recv(t, done, what, args...)
}

// Until polls cond (every millisecond) until it returns true, Limit(t) at
// most; then it fails t, naming what (formatted with args) and dumping the
// goroutines.
func Until(t testing.TB, cond func() bool, what string, args ...any) {
	t.Helper()
	d := Limit(t)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s; goroutines:\n%s", d, fmt.Sprintf(what, args...), Goroutines())
		}
		time.Sleep(time.Millisecond)
	}
}

// StuckError is Process's error for a child that did not exit in time.
type StuckError struct {
	Limit time.Duration
	// Grace: how long it was given to exit after SIGQUIT (QuitGrace).
	Grace time.Duration
	// Killed: it did not exit within Grace of SIGQUIT either and was
	// sent SIGKILL.
	Killed bool
	// Waited: cmd.Wait returned, so cmd.ProcessState and cmd's output may
	// be read. It is false only if even SIGKILL did not end the wait within
	// QuitGrace.
	Waited bool
}

func (e *StuckError) Error() string {
	s := fmt.Sprintf("still running after %s: sent SIGQUIT (a Go program prints its goroutines to its stderr and exits)", e.Limit)
	if e.Killed {
		s += fmt.Sprintf(", then SIGKILL %s later", e.Grace)
	}
	if !e.Waited {
		s += fmt.Sprintf(", and it was still not reaped %s after that", QuitGrace)
	}
	return s
}

// Process waits for cmd, started, to exit, d at most. A child still running
// then is sent SIGQUIT, which makes a Go program print its goroutines to its
// stderr and exit, and SIGKILL if it is still there QuitGrace later. It
// returns cmd.Wait's error, or a *StuckError when it had to signal the child
// (cmd's output is then whole, unless the error's Waited is false: read it
// for the goroutines). A cmd whose
// output is copied by a goroutine (a writer that is not an *os.File) should
// have a WaitDelay, so that a grandchild holding the pipe cannot stall Wait.
func Process(cmd *exec.Cmd, d time.Duration) error {
	return process(cmd, d, QuitGrace)
}

// process is Process with grace for QuitGrace after SIGQUIT (its tests'
// is shorter); the wait after SIGKILL is QuitGrace.
func process(cmd *exec.Cmd, d, grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
	}
	stuck := &StuckError{Limit: d, Grace: grace}
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	quit := time.NewTimer(grace)
	defer quit.Stop()
	select {
	case <-done:
		stuck.Waited = true
		return stuck
	case <-quit.C:
	}
	stuck.Killed = true
	_ = cmd.Process.Kill()
	last := time.NewTimer(QuitGrace)
	defer last.Stop()
	select {
	case <-done:
		stuck.Waited = true
	case <-last.C:
	}
	return stuck
}
