package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
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
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	mkfifo(t, fifo)
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
	mkfifo(t, s.Path())
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

// TestOpenLedgerRefusesNonRegular: OpenLedger on a FIFO, a socket or a
// device refuses at once, naming the path and what it is, and leaves it be.
func TestOpenLedgerRefusesNonRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.db")
	mkfifo(t, fifo)
	unblock := func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}
	sock := filepath.Join(dir, "sock.db")
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
		err := within(t, "OpenLedger("+c.path+")", 10*time.Second, unblock, func() error {
			l, err := idem.OpenLedger(c.path)
			if err == nil {
				l.Close()
			}
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "ledger "+c.path+": "+c.want) {
			t.Errorf("OpenLedger(%s): %v, want it to name the path and say %q", c.path, err, c.want)
		}
		if after := statFile(t, c.path); !before.same(after) {
			t.Errorf("%s changed: %v → %v", c.path, before.mode, after.mode)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("files were created beside them: %v", ents)
	}
}

// TestStateFileFollowsSymlink: a state file that is a symbolic link is
// followed: the link stays a link, the target gets every update, and the
// lock is the target's, shared with a store opened on the target itself.
func TestStateFileFollowsSymlink(t *testing.T) {
	t.Parallel()
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

	// The link is re-pointed while s is open: s keeps using the target it
	// resolved; a store opened afterwards uses the new one.
	target2 := filepath.Join(targetDir, "other.json")
	if err := openStateAt(t, target2).Run(ctx, idem.Key{Job: "report", Period: "2026-11-05"}, ok); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target2, link); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, idem.Key{Job: "report", Period: "2026-10-31"}, ok); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{target: "2026-10-31", target2: "2026-11-05"} {
		if js, err := openStateAt(t, path).Job(ctx, "report"); err != nil || js.Cursor != want {
			t.Errorf("%s after re-pointing the link: watermark %q (%v), want %s", path, js.Cursor, err, want)
		}
	}
	if p := openStateAt(t, link).Path(); p != target2 {
		t.Errorf("a store opened after re-pointing the link uses %s, want %s", p, target2)
	}
}

// TestStateFileDanglingSymlink: a link whose target does not exist is
// refused with both names, and nothing is created.
func TestStateFileDanglingSymlink(t *testing.T) {
	t.Parallel()
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

// dirState is every file of a directory with its mode and bytes.
func dirState(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]fileState{}
	for _, e := range ents {
		m[e.Name()] = statFile(t, filepath.Join(dir, e.Name()))
	}
	return m
}

func sameDir(t *testing.T, before, after map[string]fileState) {
	t.Helper()
	for name, b := range before {
		if a, ok := after[name]; !ok || !a.same(b) {
			t.Errorf("%s changed (mode %v → %v, %d → %d bytes)", name, b.mode, a.mode, len(b.data), len(a.data))
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s was created", name)
		}
	}
}

// appDB creates an application's SQLite database at path with stmts, and
// closes it.
func appDB(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestOpenLedgerRefusesForeignDatabase: OpenLedger on another
// application's SQLite file (tables of its own, no idem ledger in it)
// refuses with ErrNotLedger, naming the path and its tables, and leaves the
// directory byte for byte as it was: no idem tables, no switch to WAL, no
// -wal or -shm file. So does a database whose idem_runs is the
// application's own table, through OpenLedger and NewLedger alike.
func TestOpenLedgerRefusesForeignDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		stmts []string
		want  string
	}{
		{"rollback journal", []string{`CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)`, `CREATE TABLE orders(id INTEGER)`, `INSERT INTO users VALUES(1, 'ann')`},
			"another application's SQLite database (tables orders, users)"},
		{"wal", []string{`PRAGMA journal_mode=WAL`, `CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)`, `INSERT INTO users VALUES(1, 'ann')`},
			"another application's SQLite database (tables users)"},
		{"own idem_runs only", []string{`CREATE TABLE idem_runs(id INTEGER PRIMARY KEY, name TEXT)`},
			"its table idem_runs is not idem's: it has the columns (id, name) and lacks (job, period,"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "app.db")
			appDB(t, path, c.stmts...)
			before := dirState(t, dir)
			l, err := idem.OpenLedger(path)
			if err == nil {
				l.Close()
			}
			if !errors.Is(err, idem.ErrNotLedger) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("OpenLedger: %v, want ErrNotLedger naming %s and saying %q", err, path, c.want)
			}
			sameDir(t, before, dirState(t, dir))
		})
	}

	t.Run("NewLedger, app's own idem_runs", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "app.db")
		appDB(t, path, `CREATE TABLE users(id INTEGER)`, `CREATE TABLE idem_runs(run_id INTEGER PRIMARY KEY, job TEXT, started TEXT)`)
		before := dirState(t, dir)
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = idem.NewLedger(ctx, db)
		db.Close()
		if !errors.Is(err, idem.ErrNotLedger) || !strings.Contains(err.Error(), "idem_runs is not idem's") || !strings.Contains(err.Error(), "lacks (period, status,") {
			t.Fatalf("NewLedger: %v, want ErrNotLedger about idem_runs", err)
		}
		sameDir(t, before, dirState(t, dir))
	})

	// Sharing stays possible on purpose: a database that NewLedger attached
	// to is an idem ledger (it has idem_meta), which OpenLedger (and so the
	// idem command) opens.
	t.Run("shared on purpose", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "app.db")
		appDB(t, path, `CREATE TABLE users(id INTEGER)`)
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := idem.NewLedger(ctx, db); err != nil {
			t.Fatal(err)
		}
		db.Close()
		l, err := idem.OpenLedger(path)
		if err != nil {
			t.Fatalf("OpenLedger on a database shared through NewLedger: %v", err)
		}
		l.Close()
	})
	t.Run("empty SQLite database", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "new.db")
		appDB(t, path, `CREATE TABLE x(a)`, `DROP TABLE x`)
		l, err := idem.OpenLedger(path)
		if err != nil {
			t.Fatalf("OpenLedger on an empty database: %v", err)
		}
		l.Close()
	})
}

// TestLedgerDeletedWhileOpen: a ledger file deleted under an open Ledger is
// reported (ErrLedgerReplaced, with the path) by the next write and by
// every new connection, and no new, empty ledger is created in its place.
// A file put in its place is not used either.
func TestLedgerDeletedWhileOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	for _, replace := range []bool{false, true} {
		name := map[bool]string{false: "deleted", true: "replaced"}[replace]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			l := openLedger(t, dir)
			path := l.Path()
			if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, ok); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			var other fileState
			if replace {
				other2 := openLedger(t, t.TempDir())
				if err := other2.Run(ctx, idem.Key{Job: "other", Period: "2026-10-27"}, ok); err != nil {
					t.Fatal(err)
				}
				other2.Close()
				if err := os.Rename(other2.Path(), path); err != nil {
					t.Fatal(err)
				}
				other = statFile(t, path)
			}
			want := "was deleted while open"
			if replace {
				want = "was replaced by another file while open"
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, idem.ErrLedgerReplaced) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v, want ErrLedgerReplaced naming %s, saying %q", what, err, path, want)
				}
			}
			// A write (on the connections the ledger keeps for writes).
			ran := false
			check("Run", l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, func(context.Context) error { ran = true; return nil }))
			if ran {
				t.Error("fn ran")
			}
			// Writes in a group (the file is checked once for the
			// group's transaction): every one refused, no fn run.
			var wg sync.WaitGroup
			var ranInGroup atomic.Int32
			errs := make([]error, 16)
			for i := range errs {
				wg.Go(func() {
					errs[i] = l.Run(ctx, idem.Key{Job: "settle", Period: fmt.Sprintf("2026-11-%02d", i+1)}, func(context.Context) error {
						ranInGroup.Add(1)
						return nil
					})
				})
			}
			testwait.Group(t, &wg, "16 concurrent Runs on a %s ledger", name)
			for i, err := range errs {
				check(fmt.Sprintf("concurrent Run %d", i), err)
			}
			if n := ranInGroup.Load(); n > 0 {
				t.Errorf("fn ran %d times", n)
			}
			// A new connection for a read.
			l.DB().SetMaxIdleConns(0)
			_, _, err := l.Lookup(ctx, idem.Key{Job: "settle", Period: "2026-10-27"})
			check("Lookup on a new connection", err)
			if replace {
				if st := statFile(t, path); !st.same(other) {
					t.Error("the file put in its place was changed")
				}
			} else if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a new ledger file was created: %v", err)
			}
		})
	}
}

// readOnlyDir makes dir unwritable for this process: chattr +i (which
// stops root too, and needs root or CAP_LINUX_IMMUTABLE) or, for another
// user, chmod 0555. It skips the test, saying why, where neither works.
func readOnlyDir(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return
	}
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("running as root, and chattr +i cannot make %s read-only here (%v %s)", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
}

// readOnlyFile makes the file at path unwritable for this process, as
// readOnlyDir does a directory.
func readOnlyFile(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("running as root, and chattr +i cannot make %s read-only here (%v %s)", path, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
}

// TestReadOnlyDirectory: a ledger or state file in a directory this process
// cannot write is reported with the path and "read-only or not writable",
// not as SQLite's "unable to open database file (14)", and nothing in the
// directory changes.
func TestReadOnlyDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	const want = "is read-only or not writable by this process"
	k := idem.Key{Job: "settle", Period: "2026-10-27"}
	t.Run("new ledger", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		readOnlyDir(t, dir)
		path := filepath.Join(dir, "ledger.db")
		l, err := idem.OpenLedger(path)
		if err == nil {
			l.Close()
		}
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "directory "+dir+" "+want) {
			t.Fatalf("OpenLedger: %v, want the path and the directory %s", err, want)
		}
		t.Log(err)
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("files created: %v", ents)
		}
	})
	t.Run("existing ledger", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		l := openLedger(t, dir)
		if err := l.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
		l.Close()
		path := l.Path()
		before := dirState(t, dir)
		readOnlyDir(t, dir)
		l, err := idem.OpenLedger(path)
		if err == nil {
			err = l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, ok)
			l.Close()
		}
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "directory "+dir+" "+want) {
			t.Fatalf("ledger in a read-only directory: %v, want the path and the directory %s", err, want)
		}
		t.Log(err)
		sameDir(t, before, dirState(t, dir))
	})
	t.Run("read-only ledger file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		l := openLedger(t, dir)
		if err := l.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
		l.Close()
		path := l.Path()
		readOnlyFile(t, path)
		before := statFile(t, path)
		l, err := idem.OpenLedger(path)
		if err == nil {
			err = l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, ok)
			l.Close()
		}
		if err == nil || !strings.Contains(err.Error(), path+" "+want) {
			t.Fatalf("read-only ledger: %v, want %s %s", err, path, want)
		}
		t.Log(err)
		if after := statFile(t, path); !before.same(after) {
			t.Error("the ledger changed")
		}
	})
	t.Run("state file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		s := openState(t, dir)
		if err := s.Run(ctx, k, ok); err != nil {
			t.Fatal(err)
		}
		before := dirState(t, dir)
		readOnlyDir(t, dir)
		for _, opt := range []idem.Option{idem.AtLeastOnce(), idem.AtMostOnce()} {
			err := s.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-28"}, ok, opt)
			if err == nil || !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), "directory "+dir+" "+want) {
				t.Errorf("state file in a read-only directory: %v, want the path and the directory %s", err, want)
			}
		}
		// A job's lock file keeps the last attempt number claimed (written at
		// the claim, before the failed write): it may change; nothing else
		// may, and nothing may be created.
		after := dirState(t, dir)
		for name := range before {
			if strings.HasSuffix(name, ".lock") && after[name].mode == before[name].mode {
				after[name] = before[name]
			}
		}
		sameDir(t, before, after)
	})
}
