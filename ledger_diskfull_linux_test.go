package idem_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testns"
)

const envDiskCauseDir = "IDEM_TEST_DISKCAUSE_DIR"

// TestLedgerDiskErrorsNameTheCause puts a ledger on a real tmpfs of 2 MiB
// and fills it: the Run that cannot write fails with an error that says
// "no space left on device", names the ledger, and matches
// syscall.ENOSPC; the handle refuses further writes (the write failed on
// the disk); OpenLedger on the full file system says the same. Once space
// is freed, a new handle runs the period. Then the file system is made
// read-only: OpenLedger and Run say read-only and match EROFS. Last, with
// the process's limit of open files reached, OpenLedger says "too many open
// files" and matches EMFILE (SQLite reported it as "attempt to write a
// readonly database").
//
// The child mounts the tmpfs in a user and mount namespace of its own
// (package testns): no root needed.
func TestLedgerDiskErrorsNameTheCause(t *testing.T) {
	if dir := os.Getenv(envDiskCauseDir); dir != "" {
		diskCauseChild(t, dir)
		return
	}
	testns.Run(t, envDiskCauseDir)
}

// fill writes a file in dir until the file system is full, and returns
// its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	for n := len(buf) / 2; n > 0; n /= 2 { // the last bytes too
		f.Write(buf[:n])
	}
	return p
}

// wantCause fails t unless err names path and says msg, and matches errno.
func wantCause(t *testing.T, what string, err error, path, msg string, errno syscall.Errno) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case !errors.Is(err, errno):
		t.Errorf("%s: error does not match %v (%s): %v", what, errno, errno.Error(), err)
	case !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), path):
		t.Errorf("%s: error does not say %q and name %s: %v", what, msg, path, err)
	default:
		t.Logf("%s: %v", what, err)
	}
}

func diskCauseChild(t *testing.T, dir string) {
	testns.MountTmpfs(t, dir, "2m")
	ctx := context.Background()
	path := filepath.Join(dir, "ledger.db")
	ran := func(context.Context) error { return nil }
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-26"}, ran); err != nil {
		t.Fatal(err)
	}

	// Full.
	filler := fill(t, dir)
	key := idem.Key{Job: "settle", Period: "2026-10-27"}
	for i := 0; i < 50 && err == nil; i++ { // the -wal file may have room for a few pages
		key.Period = "2026-11-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		err = l.Run(ctx, key, ran)
	}
	wantCause(t, "Run on a full tmpfs", err, path, "no space left on device", syscall.ENOSPC)
	if !idemstore.IsFatal(err) {
		t.Errorf("Run on a full tmpfs: the error is not fatal for the handle: %v", err)
	}
	os.Remove(filler)
	err = l.Run(ctx, idem.Key{Job: "settle", Period: "2026-12-01"}, ran)
	if err == nil || !strings.Contains(err.Error(), "opened anew") {
		t.Errorf("Run on the handle after its write failed, space freed: %v, want the handle's refusal", err)
	}
	l.Close()
	filler = fill(t, dir)
	l, err = idem.OpenLedger(path) // may need no room: then the Run does
	if err == nil {
		err = l.Run(ctx, idem.Key{Job: "settle", Period: "2026-12-02"}, ran)
		l.Close()
	}
	wantCause(t, "OpenLedger and Run on a full tmpfs", err, path, "no space left on device", syscall.ENOSPC)
	os.Remove(filler)
	l, err = idem.OpenLedger(path)
	if err != nil {
		t.Fatalf("OpenLedger once space is freed: %v", err)
	}
	if err := l.Run(ctx, key, ran); err != nil {
		t.Errorf("Run of %s on a new handle once space is freed: %v", key, err)
	}
	l.Close()

	// Read-only.
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Logf("remount read-only: %v: the read-only part is left out", err)
	} else {
		l, err = idem.OpenLedger(path)
		if err == nil {
			err = l.Run(ctx, idem.Key{Job: "settle", Period: "2026-12-03"}, ran)
			l.Close()
		}
		wantCause(t, "OpenLedger and Run on a read-only tmpfs", err, dir, "read-only", syscall.EROFS)
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT, ""); err != nil {
			t.Fatalf("remount read-write: %v", err)
		}
	}

	// Out of file descriptors.
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := rl
	low.Cur = uint64(len(fds) + 2)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var held []*os.File
	for { // take every descriptor left
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		held = append(held, f)
	}
	_, err = idem.OpenLedger(path)
	for _, f := range held {
		f.Close()
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	wantCause(t, "OpenLedger with no file descriptor left", err, path, "too many open files", syscall.EMFILE)
}
