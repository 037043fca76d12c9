//go:build unix

package idem_test

import (
	"sync"
	"syscall"
	"testing"
)

// mkfifo makes a named pipe at path.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// needFileSizeLimit skips the test where limitFileSize cannot work.
func needFileSizeLimit(t *testing.T) {}

// limitFileSize makes every write of this process past n bytes of a file
// fail with EFBIG ("file too large"), as a full disk fails it, until the
// returned function is called (or the test ends).
func limitFileSize(t *testing.T, n uint64) (restore func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatalf("setrlimit RLIMIT_FSIZE: %v", err)
	}
	restore = sync.OnceFunc(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			panic(err)
		}
	})
	t.Cleanup(restore)
	return restore
}
