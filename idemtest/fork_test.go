package idemtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"
)

// nearDeadline is a test whose deadline is near, so that Child.Wait gives up
// on a child after about a second; it keeps what Wait reports instead of
// failing the test.
type nearDeadline struct {
	*testing.T
	deadline time.Time
	errs     []string
}

func (n *nearDeadline) Deadline() (time.Time, bool) { return n.deadline, true }

func (n *nearDeadline) Errorf(format string, args ...any) {
	n.errs = append(n.errs, fmt.Sprintf(format, args...))
}

// hangInChild never returns: the child's stuck goroutine.
func hangInChild() {
	for {
		time.Sleep(time.Hour)
	}
}

// TestWaitQuitsStuckChild: Wait gives up on a child that does not end,
// sends it SIGQUIT, and reports (Exit.Stuck, a test error) with the child's
// goroutines, instead of waiting without end.
func TestWaitQuitsStuckChild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nt := &nearDeadline{T: t}
	c := Start(nt, dir, func(dir string) {
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644) // its signal handling is in place
		hangInChild()
	})
	testwait.Until(t, func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil }, "the child to start")
	// Limit leaves max(left/10, 15 s) before the deadline: 16 s gives the
	// wait about a second.
	nt.deadline = time.Now().Add(16 * time.Second)
	e := c.Wait()
	if !e.Stuck || e.Killed {
		t.Fatalf("exit %+v, want Stuck and not Killed", e)
	}
	for _, want := range []string{"SIGQUIT: quit", "hangInChild"} {
		if !strings.Contains(e.Output, want) {
			t.Errorf("output without %q:\n%s", want, e.Output)
		}
	}
	if len(nt.errs) != 1 || !strings.Contains(nt.errs[0], "still running after") || !strings.Contains(nt.errs[0], "hangInChild") {
		t.Errorf("test errors %q, want one that says the child was still running, with its goroutines", nt.errs)
	}
}

// TestBlockUntilGivesUp: BlockUntil does not wait without end for timers
// that never come: it panics with the goroutines; BlockUntilContext returns
// when its context ends.
func TestBlockUntilGivesUp(t *testing.T) {
	clk := NewClock(time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC))
	defer func(d time.Duration) { blockLimit = d }(blockLimit)
	blockLimit = 50 * time.Millisecond
	func() {
		defer func() {
			msg := fmt.Sprint(recover())
			if !strings.Contains(msg, "BlockUntil(1): 0 timers pending") || !strings.Contains(msg, "TestBlockUntilGivesUp") {
				t.Errorf("BlockUntil with no timer pending: panic %q, want one naming the wait, with the goroutines", msg)
			}
		}()
		clk.BlockUntil(1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 1); err == nil {
		t.Fatal("BlockUntilContext with no timer pending returned nil")
	}
	clk.After(time.Hour)
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := clk.BlockUntilContext(ctx2, 1); err != nil {
		t.Fatalf("BlockUntilContext with a timer pending: %v", err)
	}
}

// TestStartChildSkipsRaceExitSleep: a child runs with GORACE's
// atexit_sleep_ms=0 added to this process's GORACE, unless GORACE already
// sets atexit_sleep_ms, which it then keeps as it is.
func TestStartChildSkipsRaceExitSleep(t *testing.T) {
	for _, c := range []struct{ name, parent, want string }{
		{"unset", "", "atexit_sleep_ms=0"},
		{"other options", "halt_on_error=1", "halt_on_error=1 atexit_sleep_ms=0"},
		{"set by the caller", "atexit_sleep_ms=5 halt_on_error=1", "atexit_sleep_ms=5 halt_on_error=1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !IsChild(t) { // the child must see the environment Start gave it
				t.Setenv("GORACE", c.parent)
			}
			e := Fork(t, "", func(string) { fmt.Printf("GORACE=%q\n", os.Getenv("GORACE")) })
			if e.Code != 0 || e.Killed || !strings.Contains(e.Output, fmt.Sprintf("GORACE=%q\n", c.want)) {
				t.Fatalf("child: %+v; want it to print GORACE=%q", e, c.want)
			}
		})
	}
}

// TestStartChildTempDirRemoved: what a child creates with t.TempDir (it
// runs the test up to Start, and never removes it) is removed with the
// parent test's temporary directories.
func TestStartChildTempDirRemoved(t *testing.T) {
	t.Parallel()
	var childDir string
	t.Run("fork", func(t *testing.T) {
		dir := t.TempDir() // in the child too: a directory of its own
		e := Fork(t, "", func(string) { fmt.Print(dir) })
		childDir = e.Output
		if e.Code != 0 || !filepath.IsAbs(childDir) || childDir == dir {
			t.Fatalf("child: %+v; want it to print a temporary directory of its own", e)
		}
		if _, err := os.Stat(childDir); err != nil {
			t.Fatalf("the child's temporary directory: %v", err)
		}
	})
	if _, err := os.Stat(childDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the child's temporary directory %s is still there after its test ended (%v)", childDir, err)
	}
}
