package idem_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgo/idem"
)

// TestStateFileLockReleasedWhileShared: an attempt's end releases its job's
// lock even while another descriptor shares the lock file's open file
// description, as a child this process forks at that moment does until its
// exec closes the copies it got of every descriptor (os/exec, another
// goroutine). Before, the lock lived on in that copy, and the job's next Run
// found it in progress. The test keeps such a copy: a dup of the lock's
// descriptor, taken in fn.
func TestStateFileLockReleasedWhileShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openState(t, t.TempDir())
	var dups []int
	t.Cleanup(func() {
		for _, fd := range dups {
			syscall.Close(fd)
		}
	})
	for i, mode := range []idem.Option{idem.AtLeastOnce(), idem.AtMostOnce()} {
		k := idem.Key{Job: "report" + strconv.Itoa(i), Period: "2026-10-27"}
		shared := 0
		err := s.Run(ctx, k, func(context.Context) error {
			ents, err := os.ReadDir("/proc/self/fd")
			if err != nil {
				return err
			}
			var fds []int
			for _, e := range ents {
				target, err := os.Readlink("/proc/self/fd/" + e.Name())
				if err != nil || !strings.HasPrefix(target, s.Path()+".") || !strings.HasSuffix(target, ".lock") || target == s.Path()+".lock" {
					continue // not the job's lock file
				}
				fd, _ := strconv.Atoi(e.Name())
				fds = append(fds, fd)
			}
			for _, fd := range fds {
				dup, err := syscall.Dup(fd)
				if err != nil {
					return err
				}
				dups = append(dups, dup)
				shared++
			}
			return nil
		}, mode)
		if err != nil || shared != 1 {
			t.Fatalf("Run %s: %v; %d descriptors of the job's lock file shared, want 1", k, err, shared)
		}
		// The next period, while the copy lives on.
		next := idem.Key{Job: k.Job, Period: "2026-10-28"}
		var res idem.Result
		if err := s.Run(ctx, next, func(context.Context) error { return nil }, mode, idem.ReportTo(&res)); err != nil || res.Outcome != idem.Ran {
			t.Fatalf("Run %s after %s ended: %v (%s); want it run: the lock released", next, k, err, res.Outcome)
		}
		for _, fd := range dups {
			syscall.Close(fd)
		}
		dups = nil
	}
}
