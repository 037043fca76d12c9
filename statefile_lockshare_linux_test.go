package idem_test

import (
	"context"
	"os"
	"slices"
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
				if err != nil || target != idem.StateLockPath(s, k.Job) {
					continue // not the job's lock file (the store keeps other jobs' open)
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

// TestStateFileCloseDescriptors: the store keeps its lock files and its
// directory open between Runs, and Close closes them; the job's lock file
// of an attempt in progress is closed when the attempt ends (whose end,
// written after Close, opens and keeps the others again).
func TestStateFileCloseDescriptors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openState(t, dir)
	open := func() []string {
		t.Helper()
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && (target == dir || strings.HasPrefix(target, dir+"/")) {
				got = append(got, target)
			}
		}
		return got
	}
	var inFn []string
	if err := s.Run(ctx, key, func(context.Context) error {
		if err := s.Close(); err != nil {
			return err
		}
		inFn = open()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(inFn) != 1 || inFn[0] != idem.StateLockPath(s, key.Job) {
		t.Fatalf("open in fn after Close: %v; want the attempt's lock file alone", inFn)
	}
	if got := open(); slices.Contains(got, idem.StateLockPath(s, key.Job)) {
		t.Fatalf("open after the attempt that Close ran in: %v; want not the job's lock file (its end wrote the file: the others may be open again)", got)
	}
	if err := s.Run(ctx, idem.Key{Job: key.Job, Period: "2026-10-28"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := open(); len(got) != 3 {
		t.Fatalf("open between Runs: %v; want the job's lock file, the file-wide one and the directory", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := open(); len(got) != 0 {
		t.Fatalf("open after Close: %v; want none", got)
	}
}
