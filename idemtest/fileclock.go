package idemtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FileClock is an idem.Clock shared across processes: it reads the time
// from the file at Path, which the test's process writes with
// [SetFileClock]. Give it (idem.WithClock) to the child processes of a
// multi-process test ([Start]) — replicas of a Scheduler, runners killed
// at random — and move their time from the parent: a day, a month, the
// night a catch-up runs, without waiting for it. Every process reads the
// same time; a child started later reads where the parent has moved it.
//
// Now panics if the file cannot be read or holds no RFC 3339 time (write
// it before a child starts). After's timers poll the file: they fire once
// its time has moved d past what it was at the call, so a clock that the
// parent never moves never fires them (set a store's leases on the system
// clock, or move the file). The zero FileClock is not usable.
type FileClock struct{ Path string }

// Now reads the file.
func (c FileClock) Now() time.Time {
	b, err := os.ReadFile(c.Path)
	if err != nil {
		panic(fmt.Sprintf("idemtest: FileClock: %v", err))
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		panic(fmt.Sprintf("idemtest: FileClock %s: %v", c.Path, err))
	}
	return t
}

// After fires once the file's time is d past what it was at the call.
func (c FileClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	at := c.Now().Add(d)
	go func() {
		for {
			if now := c.Now(); !now.Before(at) {
				ch <- now
				return
			}
			time.Sleep(2 * time.Millisecond) // a poll, not a timing assumption
		}
	}()
	return ch
}

// SetFileClock writes now into the file at path, the file of a
// [FileClock], atomically (a reader sees the old time or the new one,
// whole), creating it if need be.
func SetFileClock(t testing.TB, path string, now time.Time) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(now.UTC().Format(time.RFC3339Nano)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
