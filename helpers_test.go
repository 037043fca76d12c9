package idem_test

import (
	"bufio"
	"context"
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

func openLedger(t testing.TB, dir string, opts ...idem.Option) *idem.Ledger {
	t.Helper()
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"), opts...)
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
