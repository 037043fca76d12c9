package idem_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

// TestStateFileSeesEveryChange: a store skips decoding the file only when
// it reads the very bytes it last decoded, so no change between two Runs
// goes unseen: an edit by hand in place, of the same size, with the
// modification time set back (the file's inode, size and mtime all as
// before: a check of identity, size and time would miss it), a new file
// renamed over it by hand, and another process's Run.
func TestStateFileSeesEveryChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openState(t, dir)
	runs := 0
	run := func(period string) idem.Outcome {
		t.Helper()
		var res idem.Result
		if err := s.Run(ctx, idem.Key{Job: "report", Period: period}, func(context.Context) error { runs++; return nil }, idem.ReportTo(&res)); err != nil {
			t.Fatalf("Run %s: %v", period, err)
		}
		return res.Outcome
	}
	// Both periods are read twice (decoded once) before the file changes.
	for _, p := range []string{"2026-10-01", "2026-10-01"} {
		run(p)
	}
	if runs != 1 {
		t.Fatalf("ran %d times, want 1", runs)
	}

	// In place, same size, same mtime: the watermark moves to 2026-10-05.
	before, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(s.Path())
	edited := bytes.ReplaceAll(b, []byte(`"2026-10-01"`), []byte(`"2026-10-05"`))
	f, err := os.OpenFile(s.Path(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(edited, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(s.Path(), before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(s.Path())
	if !os.SameFile(before, after) || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the edit changed the file's identity, size or mtime: %v %d %v → %v %d %v", before.Sys(), before.Size(), before.ModTime(), after.Sys(), after.Size(), after.ModTime())
	}
	if o := run("2026-10-04"); o != idem.AlreadyDone || runs != 1 {
		t.Fatalf("2026-10-04 after the watermark was edited to 2026-10-05 in place: %s, ran %d; want AlreadyDone", o, runs)
	}

	// A new file renamed over it by hand: the watermark moves to 2026-10-09.
	b, _ = os.ReadFile(s.Path())
	tmp := filepath.Join(dir, "edit.json")
	if err := os.WriteFile(tmp, bytes.ReplaceAll(b, []byte(`"2026-10-05"`), []byte(`"2026-10-09"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.Path()); err != nil {
		t.Fatal(err)
	}
	if o := run("2026-10-08"); o != idem.AlreadyDone || runs != 1 {
		t.Fatalf("2026-10-08 after a new file with the watermark 2026-10-09 replaced it: %s, ran %d; want AlreadyDone", o, runs)
	}

	// Another process runs 2026-10-10 and 2026-10-11.
	exit := idemtest.Fork(t, dir, func(dir string) {
		c := openState(t, dir)
		for _, p := range []string{"2026-10-10", "2026-10-11"} {
			if err := c.Run(context.Background(), idem.Key{Job: "report", Period: p}, func(context.Context) error { return nil }); err != nil {
				os.Exit(3)
			}
		}
	})
	if exit.Killed || exit.Code != 0 {
		t.Fatalf("child: %+v", exit)
	}
	if o := run("2026-10-11"); o != idem.AlreadyDone || runs != 1 {
		t.Fatalf("2026-10-11 after another process ran it: %s, ran %d; want AlreadyDone", o, runs)
	}
	if o := run("2026-10-12"); o != idem.Ran || runs != 2 {
		t.Fatalf("2026-10-12: %s, ran %d; want Ran", o, runs)
	}
	if js, err := openState(t, dir).Job(ctx, "report"); err != nil || js.Cursor != "2026-10-12" {
		t.Fatalf("watermark %q, %v; want 2026-10-12", js.Cursor, err)
	}
}

// TestStateFileLockFilesRemoved: a store keeps its lock files open between
// Runs; lock files removed by hand meanwhile are opened anew, so that its
// locks are still on the files other processes lock. Here another process
// holds the job's lock on the new lock file: the store's next Run finds it
// in progress instead of locking the removed file it kept.
func TestStateFileLockFilesRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openState(t, dir)
	if err := s.Run(ctx, key, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	locks, _ := filepath.Glob(s.Path() + ".*lock")
	if len(locks) != 2 {
		t.Fatalf("lock files %v, want the job's and the file-wide one", locks)
	}
	for _, p := range locks {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	ready := filepath.Join(dir, "ready")
	next := idem.Key{Job: key.Job, Period: "2026-10-28"}
	child := idemtest.Start(t, dir, func(dir string) {
		c := openState(t, dir)
		_ = c.Run(context.Background(), next, func(context.Context) error {
			os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
			select {} // hold the lock until killed
		})
	})
	testwait.Until(t, func() bool { _, err := os.Stat(ready); return err == nil }, "the child to take the job's lock (%s)", ready)
	ran := false
	err := s.Run(ctx, next, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, idem.ErrInProgress) || ran {
		t.Fatalf("while another process holds the job's lock on its new lock file: %v, ran %v; want ErrInProgress", err, ran)
	}
	child.Kill()
	if e := child.Wait(); !e.Killed {
		t.Fatalf("child: %+v", e)
	}
	if err := s.Run(ctx, next, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after the child died: %v, ran %v", err, ran)
	}
}

// TestStateFileClose: Close during an attempt leaves the attempt's lock
// held (another store's Run of the job finds it in progress); the store
// works after Close, and Close may be called again.
func TestStateFileClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openState(t, dir)
	other := openState(t, dir)
	var closeErr, otherErr error
	otherRan := false
	err := s.Run(ctx, key, func(context.Context) error {
		closeErr = s.Close()
		otherErr = other.Run(ctx, key, func(context.Context) error { otherRan = true; return nil })
		return nil
	})
	if err != nil || closeErr != nil {
		t.Fatalf("Run: %v; Close in fn: %v", err, closeErr)
	}
	if !errors.Is(otherErr, idem.ErrInProgress) || otherRan {
		t.Fatalf("another store's Run while the closed store's attempt runs: %v, ran %v; want ErrInProgress", otherErr, otherRan)
	}
	next := idem.Key{Job: key.Job, Period: "2026-10-28"}
	if err := s.Run(ctx, next, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Run after Close: %v", err)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	// The lock is free for the other store once the attempt ended.
	var res idem.Result
	if err := other.Run(ctx, idem.Key{Job: key.Job, Period: "2026-10-29"}, func(context.Context) error { return nil }, idem.ReportTo(&res)); err != nil || res.Outcome != idem.Ran {
		t.Fatalf("the other store after Close: %v, %s", err, res.Outcome)
	}
}
