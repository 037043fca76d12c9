package idem_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// t0 is the fake clocks' start.
var t0 = time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC)

// newLedgerFile is the file of a new, empty ledger, made once by
// OpenLedger: openLedger starts a ledger that does not exist yet from a copy
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

// openLedger opens the ledger dir/ledger.db, creating it if need be, and
// closes it when t ends.
func openLedger(t testing.TB, dir string, opts ...idem.Option) *idem.Ledger {
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

// effects is an append-only log of fn's effects: the "downstream". Each
// line is fsynced before fn returns, so it survives the process.
type effects struct {
	path string
	mu   sync.Mutex
}

func newEffects(dir string) *effects { return &effects{path: filepath.Join(dir, "effects.log")} }

func (e *effects) add(t testing.TB, line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := os.OpenFile(e.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		panic(err)
	}
	if err := f.Sync(); err != nil {
		panic(err)
	}
}

// counts returns how often each line was logged.
func (e *effects) counts(t testing.TB) map[string]int {
	if t != nil {
		t.Helper()
	}
	m := map[string]int{}
	f, err := os.Open(e.path)
	if os.IsNotExist(err) {
		return m
	}
	if err != nil {
		panic(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); line != "" {
			m[line]++
		}
	}
	return m
}

func mustLookup(t testing.TB, s idem.Store, key idem.Key) idem.Record {
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
