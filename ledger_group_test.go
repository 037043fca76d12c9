package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// groupOf starts n writes of l's own while its writes are held, waits
// until all n wait in its group, and lets them go: they commit as one
// group. write(i) is the i-th write's body, durable(i) whether it asks
// for a synced commit; the writes' errors are returned in order.
func groupOf(t *testing.T, l *idem.Ledger, n int, durable func(i int) bool, write func(i int, exec func(string, ...any) error) error) []error {
	t.Helper()
	ctx := context.Background()
	release := idem.LedgerHoldWrites(l)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = idem.LedgerOwnWrite(ctx, l, durable(i), func(exec func(string, ...any) error) error { return write(i, exec) })
		}()
	}
	testwait.Until(t, func() bool { return idem.LedgerGroupPending(l) == n }, "%d writes to wait in the ledger's group", n)
	release()
	testwait.Group(t, &wg, "the %d grouped writes to return", n)
	return errs
}

// TestLedgerGroupCommitIsolatesAFailedWrite: writes that commit as one
// group each run in a savepoint: the one whose statements fail is rolled
// back alone and gets its own error; the others are committed.
func TestLedgerGroupCommitIsolatesAFailedWrite(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE g(i INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	const n, bad = 8, 3
	errBad := errors.New("write 3 fails after its insert")
	errs := groupOf(t, l, n, func(int) bool { return true }, func(i int, exec func(string, ...any) error) error {
		if err := exec(`INSERT INTO g(i) VALUES(?)`, i); err != nil {
			return err
		}
		if i == bad {
			return errBad
		}
		return nil
	})
	for i, err := range errs {
		switch {
		case i == bad && !errors.Is(err, errBad):
			t.Errorf("write %d: %v, want its own error %q", i, err, errBad)
		case i != bad && err != nil:
			t.Errorf("write %d: %v, want nil (only write %d failed)", i, err, bad)
		}
	}
	rows, err := l.DB().QueryContext(ctx, `SELECT i FROM g ORDER BY i`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []int
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
	}
	if want := []int{0, 1, 2, 4, 5, 6, 7}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows committed: %v, want %v (all but the failed write's)", got, want)
	}
}

// TestLedgerGroupCommitMixed: a group that mixes writes needing no sync
// (an AtLeastOnce claim) with durable ones (a done mark) commits them
// apart: the first with synchronous=NORMAL, answered without waiting for
// the other's fsync, the durable ones with synchronous=FULL, so synced.
// Each write records the setting its statements ran under.
func TestLedgerGroupCommitMixed(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE g(i INTEGER PRIMARY KEY, sync INTEGER)`); err != nil {
		t.Fatal(err)
	}
	const n = 8
	durable := func(i int) bool { return i%2 == 1 }
	errs := groupOf(t, l, n, durable, func(i int, exec func(string, ...any) error) error {
		return exec(`INSERT INTO g(i, sync) SELECT ?, synchronous FROM pragma_synchronous`, i)
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	rows, err := l.DB().QueryContext(ctx, `SELECT i, sync FROM g ORDER BY i`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var i, sync int
		if err := rows.Scan(&i, &sync); err != nil {
			t.Fatal(err)
		}
		got++
		// PRAGMA synchronous: 1 NORMAL, 2 FULL.
		if want := map[bool]int{false: 1, true: 2}[durable(i)]; sync != want {
			t.Errorf("write %d (durable %v) ran under synchronous=%d, want %d", i, durable(i), sync, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("%d rows committed, want %d", got, n)
	}
}

// TestLedgerGroupCommitConcurrentRuns: Runs of new keys from many
// goroutines (their claims and done marks grouped) each run fn once and
// leave their key done; Runs of the same keys again run nothing.
func TestLedgerGroupCommitConcurrentRuns(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	const goroutines, keys = 16, 400
	var mu sync.Mutex
	ran := map[string]int{}
	var wg sync.WaitGroup
	for pass := range 2 {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := g; k < keys; k += goroutines {
					key := idem.Key{Job: "group", Period: fmt.Sprintf("%04d", k)}
					err := l.Run(ctx, key, func(context.Context) error {
						mu.Lock()
						ran[key.Period]++
						mu.Unlock()
						return nil
					})
					if err != nil {
						t.Errorf("pass %d: Run(%s): %v", pass, key, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	if len(ran) != keys {
		t.Errorf("fn ran for %d keys, want %d", len(ran), keys)
	}
	for p, n := range ran {
		if n != 1 {
			t.Errorf("fn ran %d times for period %s, want once", n, p)
		}
	}
	recs, err := l.List(ctx, idem.Filter{Job: "group"})
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, r := range recs {
		if r.Status == idem.StatusDone {
			done++
		}
	}
	if done != keys {
		t.Errorf("%d keys done in the ledger, want %d", done, keys)
	}
}
