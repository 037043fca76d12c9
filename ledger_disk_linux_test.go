package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// envFsyncChild makes the test binary a child of TestLedgerFsyncFailure:
// MODE, then the ledger's directory.
const envFsyncChild = "IDEM_TEST_FSYNC_CHILD"

var fsyncKey = idem.Key{Job: "settle", Period: "2026-10-27"}

// fsyncModes are the calls TestLedgerFsyncFailure makes under injected
// faults.
var fsyncModes = []string{"at-least-once", "at-most-once", "two-phase", "value", "tx"}

// TestLedgerFsyncFailure runs one call of each mode in a child process
// under strace, which makes the child's Nth fsync (each N in turn) of the
// ledger's -wal file, or of its directory, fail with EIO; the child's
// calls all run on one OS thread (strace counts per thread), and it exits
// right after the call, without closing the ledger. A call that reported
// success must not have met an injected failure: after a failed fsync the
// kernel may have dropped what it could not write, so the done mark may
// not survive a power loss. Afterwards the ledger opens, passes
// integrity_check, and a clean call completes the period as its mode
// promises, with fn's effect not doubled where the mode says so.
func TestLedgerFsyncFailure(t *testing.T) {
	if v := os.Getenv(envFsyncChild); v != "" {
		mode, dir, _ := strings.Cut(v, ":")
		fsyncChild(mode, dir)
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("strace is not installed (.ci/run installs it)")
		}
		t.Skip("strace is not installed")
	}
	if out, err := exec.Command(strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=none", "true").CombinedOutput(); err != nil {
		t.Skipf("strace cannot trace here (%v): %s", err, out)
	}
	prep := t.TempDir()
	l, err := idem.OpenLedger(filepath.Join(prep, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.DB().Exec(`CREATE TABLE effects(job TEXT, period TEXT)`); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	image, err := os.ReadFile(filepath.Join(prep, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	const maxN = 8 // the calls make at most 6 fsyncs of the -wal file and the directory on their thread
	for _, mode := range fsyncModes {
		fired := 0
		for n := 1; n <= maxN; n++ {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.db")
			if err := os.WriteFile(path, image, 0o644); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "strace.log")
			cmd := exec.Command(strace, "-f", "-qq", "-y", "-o", log, "-e", "trace=openat,fsync,fdatasync",
				"-e", fmt.Sprintf("inject=fsync,fdatasync:error=EIO:when=%d", n), "-P", path+"-wal", "-P", dir,
				os.Args[0], "-test.run=^TestLedgerFsyncFailure$", "-test.count=1")
			cmd.Env = append(os.Environ(), envFsyncChild+"="+mode+":"+dir)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if err := testwait.Process(cmd, testwait.Limit(t)); err != nil {
				t.Fatalf("%s, fsync %d failing: child: %v\n%s", mode, n, err, out.String())
			}
			trace, _ := os.ReadFile(log)
			injected, relevant := lostSync(string(trace), path+"-wal", dir)
			result := resultLine(out.String())
			if injected {
				fired++
			}
			if result == "" {
				t.Fatalf("%s, fsync %d failing: no result from the child:\n%s", mode, n, out.String())
			}
			if relevant && result == "ok" {
				t.Errorf("%s, fsync %d of the -wal file or its directory failing with EIO: the call reported success\nstrace:\n%s", mode, n, trace)
			}
			checkAfterFault(t, fmt.Sprintf("%s, fsync %d failing (%s)", mode, n, result), mode, dir)
		}
		if fired == 0 {
			t.Errorf("%s: no injected fsync fired: the test tests nothing", mode)
		}
	}
}

// lostSync reads an strace -y log of openat and fsync calls on the -wal
// file wal and its directory dir: injected reports whether an injected
// failure fired; relevant, whether one may have dropped something a
// commit rests on: a failed fsync of the -wal file, or a failed fsync of
// the directory while the -wal file's entry was not yet synced (between
// its creation and the next successful fsync of the directory). A failed
// fsync of the directory after its entry was made durable drops nothing
// of the ledger's.
func lostSync(trace, wal, dir string) (injected, relevant bool) {
	pending := false // the -wal file's directory entry is not known durable
	for _, line := range strings.Split(trace, "\n") {
		failed := strings.Contains(line, "INJECTED")
		injected = injected || failed
		switch {
		case strings.Contains(line, "openat(") && strings.Contains(line, `"`+wal+`"`) && strings.Contains(line, "O_CREAT") && !strings.Contains(line, "= -1"):
			pending = true // the first open creates it: the prepared ledger has none
		case strings.Contains(line, "sync(") && strings.Contains(line, "<"+wal+">"):
			relevant = relevant || failed
		case strings.Contains(line, "sync(") && strings.Contains(line, "<"+dir+">"):
			if failed {
				relevant = relevant || pending
			} else {
				pending = false
			}
		}
	}
	return injected, relevant
}

// resultLine returns what the child printed after "RESULT ", or "".
func resultLine(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(line, "RESULT "); ok {
			return r
		}
	}
	return ""
}

// fsyncChild makes one call of mode on the ledger in dir, on one OS thread,
// prints its result and exits without closing the ledger.
func fsyncChild(mode, dir string) {
	runtime.LockOSThread()
	ctx := context.Background()
	var err error
	defer func() {
		if err != nil {
			fmt.Printf("RESULT err: %s\n", strings.ReplaceAll(err.Error(), "\n", " | "))
		} else {
			fmt.Println("RESULT ok")
		}
		os.Exit(0)
	}()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return
	}
	err = fsyncCall(ctx, l, mode, dir, idem.WithLease(time.Minute))
}

// fsyncCall makes mode's call of fsyncKey on l; fn notes each run in
// dir/effects (or, for "tx", in the table effects).
func fsyncCall(ctx context.Context, l *idem.Ledger, mode, dir string, opts ...idem.Option) error {
	fn := func(context.Context) error { return noteEffect(dir) }
	switch mode {
	case "at-least-once":
		return l.Run(ctx, fsyncKey, fn, append(opts, idem.AtLeastOnce())...)
	case "at-most-once":
		return l.Run(ctx, fsyncKey, fn, append(opts, idem.AtMostOnce())...)
	case "two-phase":
		has := func(context.Context, idem.Key) (bool, error) { n, err := fsyncEffects(dir); return n > 0, err }
		return l.Run(ctx, fsyncKey, fn, append(opts, idem.TwoPhase(has))...)
	case "value":
		_, err := idem.RunValueOn(ctx, l, fsyncKey, func(ctx context.Context) (int, error) { return 7, fn(ctx) }, opts...)
		return err
	case "tx":
		return l.RunTx(ctx, fsyncKey, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects(job, period) VALUES(?, ?)`, fsyncKey.Job, fsyncKey.Period)
			return err
		}, opts...)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func noteEffect(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "effects"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("ran\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fsyncEffects(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "effects"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return strings.Count(string(b), "ran\n"), err
}

// laterClock is the system clock two hours on: a lease the child took has
// expired by it.
type laterClock struct{}

func (laterClock) Now() time.Time                         { return time.Now().Add(2 * time.Hour) }
func (laterClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// checkAfterFault opens the ledger in dir after a faulty call: it must
// open, pass integrity_check, and a clean call of mode must complete the
// period as the mode promises.
func checkAfterFault(t *testing.T, what, mode, dir string) {
	t.Helper()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Errorf("%s: the ledger does not open afterwards: %v", what, err)
		return
	}
	defer l.Close()
	var ic string
	if err := l.DB().QueryRow(`PRAGMA integrity_check`).Scan(&ic); err != nil || ic != "ok" {
		t.Errorf("%s: integrity_check: %q, %v", what, ic, err)
	}
	ranBefore, _ := fsyncEffects(dir)
	err = fsyncCall(context.Background(), l, mode, dir, idem.WithClock(laterClock{}))
	ran, _ := fsyncEffects(dir)
	switch {
	case mode == "at-most-once" && errors.Is(err, idem.ErrUnknownOutcome):
		if ranBefore != 1 {
			t.Errorf("%s: the next call says the outcome is unknown, but fn ran %d times before it", what, ranBefore)
		}
	case err != nil:
		t.Errorf("%s: the next clean call did not complete the period: %v", what, err)
	}
	if mode == "at-most-once" && ran > 1 {
		t.Errorf("%s: at-most-once fn ran %d times", what, ran)
	}
	if mode == "tx" {
		var n int
		if err := l.DB().QueryRow(`SELECT count(*) FROM effects`).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s: the transaction's effect is there %d times (%v), want once", what, n, err)
		}
	}
	rec, ok, err := l.Lookup(context.Background(), fsyncKey)
	if err != nil || !ok {
		t.Errorf("%s: lookup after the clean call: %v, %v", what, ok, err)
	} else if rec.Status != idem.StatusDone && rec.Status != idem.StatusUnknown {
		t.Errorf("%s: after the clean call the period is %s", what, rec.Status)
	}
}
