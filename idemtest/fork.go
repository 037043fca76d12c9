package idemtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/proc"
	"github.com/idemgo/idem/internal/testwait"
)

const (
	envChild = "IDEMTEST_CHILD"
	envArg   = "IDEMTEST_ARG"
)

// Exit is how a child process ended.
type Exit struct {
	Killed bool   // it died of SIGKILL (sent by the test, or by itself; on Windows: see [Kill])
	Code   int    // its exit code, when it exited
	Output string // its stdout and stderr
	// Stuck: it was still running when [Child.Wait] gave up on it; Wait sent
	// it SIGQUIT (its goroutines are at the end of Output), then SIGKILL if
	// need be, and marked the test failed. Killed is false then. (Windows
	// has no SIGQUIT: there the goroutines are missing.)
	Stuck bool
}

// Child is a running child process started by [Start].
type Child struct {
	t   testing.TB
	cmd *exec.Cmd
	out bytes.Buffer
}

// IsChild reports whether this process is a child started by Start for
// test t.
func IsChild(t testing.TB) bool { return os.Getenv(envChild) == t.Name() }

// Start re-executes the test binary to run only test t, in a child process
// whose copy of the test calls child(arg) when it reaches the same Start
// call, then exits 0. Everything t does before Start runs again in the child,
// so do there nothing the child must not repeat; pass what the child needs
// (a directory, say) in arg.
//
// In the parent, Start returns the running child; in the child it does not
// return.
//
// On Linux the child dies with the parent: the kernel SIGKILLs it when the
// test binary ends, even if it is killed or times out. Elsewhere the child
// is killed when the test ends (t.Cleanup), and a test binary that is
// killed, or times out, may leave it running.
//
// The child's temporary directory ($TMPDIR) is one of t's (t.TempDir), so
// that what the child creates with t.TempDir, which it never removes (it
// exits or is killed), goes when t's temporary directories do.
//
// Under the race detector, the child runs with GORACE's atexit_sleep_ms=0
// (unless GORACE sets it): its exit does not wait the race runtime's default
// second, which a test forking many children would pay for each.
func Start(t testing.TB, arg string, child func(arg string)) *Child {
	t.Helper()
	if IsChild(t) {
		child(os.Getenv(envArg))
		os.Exit(0)
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	c := &Child{t: t, cmd: exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.v=false")}
	c.cmd.Env = append(os.Environ(), envChild+"="+t.Name(), envArg+"="+arg, "TMPDIR="+t.TempDir())
	if gorace := os.Getenv("GORACE"); !strings.Contains(gorace, "atexit_sleep_ms") {
		c.cmd.Env = append(c.cmd.Env, "GORACE="+strings.TrimSpace(gorace+" atexit_sleep_ms=0"))
	}
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = &c.out
	// The child dies with this process: a test binary that times out or is
	// killed must not leave workers running. Only Linux can do that; elsewhere
	// the child is killed when the test ends.
	dies := proc.DieWithParent(c.cmd)
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("idemtest: start child: %v", err)
	}
	if !dies {
		t.Cleanup(c.Kill)
	}
	return c
}

// Wait waits for the child to end, for at most 3 minutes, or less when the
// test's deadline (go test -timeout) is nearer. A child still running then is
// stuck: Wait sends it SIGQUIT, which makes the Go runtime print its
// goroutines (into Output) and exit, and SIGKILL if it is still there 10 s
// later; it marks the test failed (t.Errorf, with the child's output) and
// returns an Exit with Stuck set.
func (c *Child) Wait() Exit {
	limit := testwait.Limit(c.t)
	err := testwait.Process(c.cmd, limit)
	var stuck *testwait.StuckError
	if errors.As(err, &stuck) {
		e := Exit{Stuck: true, Code: -1}
		if stuck.Waited { // the output is whole
			e.Code = c.cmd.ProcessState.ExitCode()
			e.Output = c.out.String()
		}
		c.t.Errorf("idemtest: child of %s (pid %d): %v; its output:\n%s", c.t.Name(), c.cmd.Process.Pid, err, e.Output)
		return e
	}
	e := Exit{Output: c.out.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if proc.Killed(ee.ProcessState) {
			e.Killed = true
			return e
		}
		e.Code = ee.ExitCode()
	} else if err != nil {
		e.Code = -1
		e.Output += fmt.Sprintf("\nidemtest: wait: %v", err)
	}
	return e
}

// Kill SIGKILLs the child (on Windows: see [Kill]).
func (c *Child) Kill() { _ = proc.Kill(c.cmd.Process) }

// Fork is Start followed by Wait.
func Fork(t testing.TB, arg string, child func(arg string)) Exit {
	t.Helper()
	return Start(t, arg, child).Wait()
}
