//go:build windows

package idem_test

import "testing"

// mkfifo skips the test: Windows has no named pipes in the file system.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	t.Skip("Windows has no FIFOs")
}

// needFileSizeLimit skips the test: Windows has no RLIMIT_FSIZE.
func needFileSizeLimit(t *testing.T) {
	t.Helper()
	t.Skip("Windows has no RLIMIT_FSIZE")
}

// limitFileSize is never reached: the tests that call it call
// needFileSizeLimit first.
func limitFileSize(t *testing.T, n uint64) (restore func()) {
	t.Helper()
	t.Fatal("limitFileSize: Windows has no RLIMIT_FSIZE")
	return nil
}
