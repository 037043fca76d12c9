package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/hostsys"
	"github.com/idemgo/idem/internal/capture"
)

// ExitTempFail is the exit code (EX_TEMPFAIL in sysexits.h) by which the
// wrapped command says "nothing happened, safe to retry".
const ExitTempFail = 75

// errStopping is the cause of the run's cancellation when idem got SIGTERM
// or SIGINT.
var errStopping = errors.New("idem is stopping (got a signal)")

// supervisor runs the wrapped command once per attempt, passes it the
// attempt's identity in its environment, and forwards SIGTERM and SIGINT to
// it.
type supervisor struct {
	argv           []string
	stdin          io.Reader
	stdout, stderr io.Writer
	cancel         context.CancelCauseFunc // cancels the whole run
	locks          cmdLocks                // the periods' command locks
	mu             sync.Mutex
	child          *os.Process // the running command, if any
	stopping       bool        // a signal came: start nothing new
	signalled      os.Signal
	capture        int // --capture: keep up to this many bytes of the command's stdout with the done mark
}

// captured keeps the first limit bytes written to it, and counts the rest.
type captured struct {
	limit   int
	b       []byte
	dropped int64
}

func (c *captured) Write(p []byte) (int, error) {
	keep := min(len(p), c.limit-len(c.b))
	c.b = append(c.b, p[:keep]...)
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}

// watch handles the signals idem receives until sigs is closed: it forwards
// each to the running command, or, when none runs, stops the run at once.
// Once a signal came, no new attempt is started; the running command is
// left to finish (or to die of the forwarded signal), and its outcome is
// recorded.
func (s *supervisor) watch(sigs <-chan os.Signal) {
	for sig := range sigs {
		s.signal(sig)
	}
}

// signal handles one signal idem received: see watch.
func (s *supervisor) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.signalled = sig
	if s.child != nil {
		_ = s.child.Signal(sig)
	} else {
		s.cancel(fmt.Errorf("%w: %v", errStopping, sig))
	}
}

// run runs the command for period p: the fn of idem's Run. Its error is
// what idem records: exit 0 is success, exit 75 a failure that is safe to
// retry (idem.NothingHappened), anything else a failure whose effect is
// unknown (which, in at-most-once mode, leaves the period unknown).
func (s *supervisor) run(ctx context.Context, p idem.Period) error {
	info, _ := idem.InfoFrom(ctx)
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = append(os.Environ(),
		"IDEM_JOB="+info.Key.Job,
		"IDEM_PERIOD="+info.Key.Period,
		"IDEM_PERIOD_START="+p.Start.Format(time.RFC3339),
		"IDEM_PERIOD_END="+p.End.Format(time.RFC3339),
		"IDEM_ATTEMPT="+strconv.FormatInt(info.Attempt, 10),
		"IDEM_REQUEST_ID="+info.RequestID,
		"IDEM_REVISION="+strconv.FormatInt(info.Revision, 10),
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
	var out *captured
	if s.capture > 0 {
		out = &captured{limit: s.capture}
		cmd.Stdout = io.MultiWriter(s.stdout, out)
	}
	hostsys.SetParentDeathSignal(cmd)

	// The period's command lock: a command of an earlier attempt, left
	// running by a killed idem, must end first. The command inherits the
	// lock (descriptor 3), so that it holds as long as it runs.
	lock, err := s.locks.lock(ctx, info.Key, func(holder string) {
		fmt.Fprintf(s.stderr, "idem: %s %s: waiting for the command of an earlier attempt to end (%s)\n",
			info.Key.Job, info.Key.Period, holder)
	})
	switch {
	case ctx.Err() != nil:
		lock.release(false)
		return idem.NothingHappened(fmt.Errorf("not started: %w", context.Cause(ctx)))
	case err != nil:
		fmt.Fprintf(s.stderr, "idem: %s %s: no command lock (%v): not waiting for a command that a killed run left behind\n",
			info.Key.Job, info.Key.Period, err)
	case lock != nil:
		cmd.ExtraFiles = []*os.File{lock.f}
	}

	s.mu.Lock()
	if s.stopping || ctx.Err() != nil {
		s.mu.Unlock()
		lock.release(false)
		return idem.NothingHappened(fmt.Errorf("not started: %w", context.Cause(ctx)))
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		lock.release(false)
		return idem.NothingHappened(fmt.Errorf("cannot start %s: %w", s.argv[0], err))
	}
	s.child = cmd.Process
	s.mu.Unlock()
	lock.started(cmd.Process.Pid, info.Key, info.Attempt)

	// The context ends while the command runs only when idem lost its lease
	// (a newer attempt took the period over): the command must not go on
	// as if it held it.
	exited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case <-exited:
		}
	}()
	err = cmd.Wait()
	close(exited)
	lock.release(err == nil)

	s.mu.Lock()
	s.child = nil
	stopping, sig := s.stopping, s.signalled
	s.mu.Unlock()
	if stopping {
		// Let idem record this attempt, then return without waiting out a
		// backoff or starting the next period.
		defer s.cancel(fmt.Errorf("%w: %v", errStopping, sig))
	}
	if out != nil && err == nil {
		if out.dropped > 0 {
			fmt.Fprintf(s.stderr, "idem: %s %s: kept the first %d bytes of the command's output (--capture); %d more were not kept\n",
				info.Key.Job, info.Key.Period, len(out.b), out.dropped)
		}
		if slot := capture.From(ctx); slot != nil {
			slot.Set(out.b)
		}
	}
	return commandError(err)
}

// commandError turns the command's exit into the error idem records.
func commandError(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Errorf("command killed by signal %v", ws.Signal())
	}
	if ee.ExitCode() == ExitTempFail {
		return idem.NothingHappened(fmt.Errorf("command exited %d (EX_TEMPFAIL): nothing happened, safe to retry", ExitTempFail))
	}
	return fmt.Errorf("command exited with status %d", ee.ExitCode())
}
