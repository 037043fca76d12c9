//go:build unix

// The CLI's end-to-end tests run commands through sh, and kill process
// groups: they need a Unix system.

package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLedgerFIFORefused: a ledger path that names a FIFO is refused by
// every command, saying what it is (doctor said it was an empty ledger).
func TestLedgerFIFORefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	fifo := filepath.Join(e.dir, "fifo.db")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	e.ledger = fifo
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"doctor", fifo}, exitFailed},
		{[]string{"ls"}, exitUsage},
		{runArgs(), exitUsage},
	} {
		stdout, stderr, code := e.idem(c.args...)
		if code != c.code || !strings.Contains(stdout+stderr, fifo+" is a named pipe (FIFO), not a regular file") && !strings.Contains(stderr, fifo+": is a named pipe (FIFO), not a regular file") {
			t.Errorf("idem %s: exit %d, want %d naming the FIFO\n%s%s", strings.Join(c.args, " "), code, c.code, stdout, stderr)
		}
	}
}
