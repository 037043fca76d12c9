// Package testledger holds what the tests of the root package and of the
// packages built on it (outbox, guard, limit) share:
// their TestMain ([Main]), a ledger per test made quickly ([Open]), the
// fake clocks' start ([T0]), an fsynced log of a job's effects
// ([Effects]), and whether the race detector is on ([Race]).
package testledger

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/effectlog"
)

// Main runs the tests of m with up to four parallel tests per CPU unless
// -parallel is given, and exits. Most tests of this repository wait rather
// than compute: on child processes being started and killed, on fsync, on
// leases running out. The default of one per CPU would leave the CPUs idle
// while they wait. The tests keep time on fake clocks; the one that must
// use the system clock (the heartbeat's) leaves a margin of two thirds of
// its lease.
func Main(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0))); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// T0 is the fake clocks' start.
var T0 = time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC)

// newLedgerFile is the file of a new, empty ledger, made once by
// OpenLedger: Open starts a ledger that does not exist yet from a copy
// of it, because creating the schema again for every test costs tens of
// milliseconds of CPU under the race detector (SQLite parsing its DDL).
// The tests of creating a ledger call idem.OpenLedger themselves.
var newLedgerFile = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "idem-test-ledger")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.db")
	l, err := idem.OpenLedger(path)
	if err != nil {
		return nil, err
	}
	if err := l.Close(); err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		return nil, fmt.Errorf("a closed new ledger left %v (%v), want ledger.db alone", ents, err)
	}
	return os.ReadFile(path)
})

// Open opens the ledger dir/ledger.db, creating it if need be, and
// closes it when t ends.
func Open(t testing.TB, dir string, opts ...idem.Option) *idem.Ledger {
	t.Helper()
	path := filepath.Join(dir, "ledger.db")
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		b, err := newLedgerFile()
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		if err != nil {
			t.Fatalf("new ledger file: %v", err)
		}
	}
	l, err := idem.OpenLedger(path, opts...)
	if err != nil {
		t.Fatalf("OpenLedger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Effects is an append-only log of fn's effects: the "downstream". Each
// line is a record of an effectlog (one write: a write a SIGKILL cuts
// short is no record), fsynced before fn returns, so it survives the
// process.
type Effects struct {
	path string
	mu   sync.Mutex
}

// NewEffects returns the log dir/effects.log.
func NewEffects(dir string) *Effects { return &Effects{path: filepath.Join(dir, "effects.log")} }

// Add appends line to the log and fsyncs it; it panics if it cannot (t
// may be nil: a child process has none).
func (e *Effects) Add(t testing.TB, line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := os.OpenFile(e.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if err := effectlog.Append(f, line); err != nil {
		panic(err)
	}
	if err := f.Sync(); err != nil {
		panic(err)
	}
}

// Counts returns how often each line was logged.
func (e *Effects) Counts(t testing.TB) map[string]int {
	if t != nil {
		t.Helper()
	}
	m, err := effectlog.Counts(e.path)
	if err != nil {
		if t != nil {
			t.Fatal(err)
		}
		panic(err)
	}
	return m
}

// MustLookup returns s's record of key, failing t if there is none.
func MustLookup(t testing.TB, s idem.Store, key idem.Key) idem.Record {
	t.Helper()
	rec, ok, err := s.Lookup(context.Background(), key)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", key, err)
	}
	if !ok {
		t.Fatalf("Lookup(%s): no record", key)
	}
	return rec
}

// OpenState opens the state file dir/state.json.
func OpenState(t testing.TB, dir string, opts ...idem.Option) *idem.StateFile {
	t.Helper()
	s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"), opts...)
	if err != nil {
		t.Fatalf("OpenStateFile: %v", err)
	}
	return s
}
