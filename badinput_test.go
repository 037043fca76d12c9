package idem_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// within runs f and returns its error, failing the test with a goroutine
// dump if f has not returned after d. unblock (if not nil) is called then,
// to free the goroutine f is stuck in.
func within(t *testing.T, what string, d time.Duration, unblock func(), f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		var dump bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&dump, 1)
		if unblock != nil {
			unblock()
		}
		t.Fatalf("%s did not return within %v; goroutines:\n%s", what, d, dump.String())
		return nil
	}
}

// fileState is what a test compares to prove a file was left alone.
type fileState struct {
	mode os.FileMode
	data []byte
}

func statFile(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fileState{mode: fi.Mode()}
	if fi.Mode().IsRegular() {
		if st.data, err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func (a fileState) same(b fileState) bool { return a.mode == b.mode && bytes.Equal(a.data, b.data) }

// TestStateFileRefusesNonRegular: a state file path that names a FIFO, a
// socket or a device is refused at open, naming the path and what it is,
// without blocking (a FIFO opened for reading waits for a writer forever)
// and without touching it. A FIFO put in the file's place after the open is
// refused by the next read, again without blocking.
func TestStateFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Opening the FIFO for writing frees a reader stuck on it.
	unblock := func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}
	sock := filepath.Join(dir, "sock.json")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range []struct{ path, want string }{
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{sock, "is a socket, not a regular file"},
		{"/dev/null", "is a character device, not a regular file"},
	} {
		before := statFile(t, c.path)
		err := within(t, "OpenStateFile("+c.path+")", 10*time.Second, unblock, func() error {
			_, err := idem.OpenStateFile(c.path)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenStateFile(%s): %v, want it to name the path and say %q", c.path, err, c.want)
		}
		err = within(t, "RepairStateFile("+c.path+")", 10*time.Second, unblock, func() error {
			_, err := idem.RepairStateFile(c.path, map[string]string{"j": "2026-10-27"})
			return err
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RepairStateFile(%s): %v, want %q", c.path, err, c.want)
		}
		if after := statFile(t, c.path); !before.same(after) {
			t.Errorf("%s changed: %v → %v", c.path, before.mode, after.mode)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("files were created beside them: %v", ents)
	}

	// The file is replaced by a FIFO while the store is open.
	s := openState(t, dir)
	ctx := context.Background()
	k := idem.Key{Job: "report", Period: "2026-10-27"}
	if err := s.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(s.Path(), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo = s.Path()
	ran := false
	err = within(t, "Run on a state file replaced by a FIFO", 10*time.Second, unblock, func() error {
		return s.Run(ctx, idem.Key{Job: "report", Period: "2026-10-28"}, func(context.Context) error { ran = true; return nil })
	})
	if err == nil || ran || !strings.Contains(err.Error(), "is a named pipe (FIFO), not a regular file") {
		t.Fatalf("Run: %v (fn ran: %v), want the FIFO refused", err, ran)
	}
	if fi, err := os.Lstat(s.Path()); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v %v", fi.Mode(), err)
	}
}

// TestStateFileFollowsSymlink: a state file that is a symbolic link is
// followed: the link stays a link, the target gets every update, and the
// lock is the target's, shared with a store opened on the target itself.
func TestStateFileFollowsSymlink(t *testing.T) {
	ctx := context.Background()
	linkDir, targetDir := t.TempDir(), t.TempDir()
	target := filepath.Join(targetDir, "real.json")
	s0, err := idem.OpenStateFile(target)
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context) error { return nil }
	if err := s0.Run(ctx, idem.Key{Job: "report", Period: "2026-10-27"}, ok); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(linkDir, "state.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	s, err := idem.OpenStateFile(link)
	if err != nil {
		t.Fatal(err)
	}
	if s.Path() != target {
		t.Errorf("Path() = %s, want the target %s", s.Path(), target)
	}
	// AtMostOnce writes twice per Run (the pending mark, then the done mark).
	for _, p := range []string{"2026-10-28", "2026-10-29"} {
		if err := s.Run(ctx, idem.Key{Job: "report", Period: p}, ok, idem.AtMostOnce()); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link is no longer a link: %v %v", fi.Mode(), err)
	}
	if dest, _ := os.Readlink(link); dest != target {
		t.Fatalf("the link points to %s, want %s", dest, target)
	}
	for _, via := range []string{target, link} {
		js, err := openStateAt(t, via).Job(ctx, "report")
		if err != nil || js.Cursor != "2026-10-29" {
			t.Errorf("watermark read through %s: %q (%v), want 2026-10-29", via, js.Cursor, err)
		}
	}
	if ents, _ := os.ReadDir(linkDir); len(ents) != 1 {
		t.Errorf("files beside the link (temp or lock files belong beside the target): %v", ents)
	}

	// One lock: while a Run through the link holds the job, a Run through
	// the target finds it in progress.
	inFn, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, idem.Key{Job: "report", Period: "2026-10-30"}, func(context.Context) error {
			close(inFn)
			<-release
			return nil
		})
	}()
	waitClosed(t, "the Run through the link to start fn", inFn)
	err = openStateAt(t, target).Run(ctx, idem.Key{Job: "report", Period: "2026-10-30"}, ok)
	close(release)
	if !errors.Is(err, idem.ErrInProgress) {
		t.Errorf("Run through the target while the link's Run holds the job: %v, want ErrInProgress", err)
	}
	if err := within(t, "the Run through the link", 10*time.Second, nil, func() error { return <-done }); err != nil {
		t.Fatal(err)
	}
}

// TestStateFileDanglingSymlink: a link whose target does not exist is
// refused with both names, and nothing is created.
func TestStateFileDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	link, target := filepath.Join(dir, "state.json"), filepath.Join(dir, "gone", "real.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err := idem.OpenStateFile(link)
	if err == nil || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), target) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("OpenStateFile on a dangling link: %v, want both paths and 'does not exist'", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files were created: %v", ents)
	}
	if dest, _ := os.Readlink(link); dest != target {
		t.Fatalf("the link changed: %s", dest)
	}
}

func openStateAt(t *testing.T, path string) *idem.StateFile {
	t.Helper()
	s, err := idem.OpenStateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitClosed waits for ch to close, failing the test with a goroutine dump
// after a deadline of its own.
func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	within(t, what, 10*time.Second, nil, func() error { <-ch; return nil })
}
