package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// groupOf runs n writes of l's own as one group (grouped). write(i) is
// the i-th write's body, durable(i) whether it asks
// for a synced commit; the writes' errors are returned in order.
func groupOf(t *testing.T, l *idem.Ledger, n int, durable func(i int) bool, write func(i int, exec func(string, ...any) error) error) []error {
	t.Helper()
	return grouped(t, l, n, func(i int) error {
		return idem.LedgerOwnWrite(context.Background(), l, durable(i), func(exec func(string, ...any) error) error { return write(i, exec) })
	})
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

// TestLedgerGroupCommitLateWrites: writes of the same kind that join the
// group while its transaction runs its statements commit with it, before
// its COMMIT; a write of the other kind waits for the next one; a late
// write that fails is rolled back alone. Whether a write ran inside the
// first write's transaction is seen from another connection: there, the
// first write's row is not visible until that transaction commits.
func TestLedgerGroupCommitLateWrites(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE g(i INTEGER PRIMARY KEY, saw0 INTEGER)`); err != nil {
		t.Fatal(err)
	}
	// saw0: whether write 0's row was committed when write i ran.
	insert := func(exec func(string, ...any) error, i int) error {
		var n int
		if err := l.DB().QueryRowContext(ctx, `SELECT count(*) FROM g WHERE i = 0`).Scan(&n); err != nil {
			return err
		}
		return exec(`INSERT INTO g(i, saw0) VALUES(?, ?)`, i, n)
	}
	errLate := errors.New("write 2 fails after its insert")
	running, release := make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // a test that gives up frees write 0 first, and so the ledger's Close
	errs := make([]error, 4)
	var wg sync.WaitGroup
	start := func(i int, durable bool, f func(exec func(string, ...any) error) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = idem.LedgerOwnWrite(ctx, l, durable, f)
		}()
	}
	// Write 0 (durable) holds its transaction open until the others wait.
	start(0, true, func(exec func(string, ...any) error) error {
		close(running)
		if err := exec(`INSERT INTO g(i, saw0) VALUES(0, 0)`); err != nil {
			return err
		}
		<-release
		return nil
	})
	testwait.Recv(t, running, "write 0 to run its statements")
	start(1, true, func(exec func(string, ...any) error) error { return insert(exec, 1) })
	start(2, true, func(exec func(string, ...any) error) error {
		if err := insert(exec, 2); err != nil {
			return err
		}
		return errLate
	})
	start(3, false, func(exec func(string, ...any) error) error { return insert(exec, 3) })
	testwait.Until(t, func() bool { return idem.LedgerGroupPending(l) == 3 }, "writes 1-3 to wait in the ledger's group")
	free()
	testwait.Group(t, &wg, "the four writes to return")
	for i, err := range errs {
		if want := error(nil); i == 2 {
			if !errors.Is(err, errLate) {
				t.Errorf("write 2: %v, want its own error %q", err, errLate)
			}
		} else if err != want {
			t.Errorf("write %d: %v, want nil", i, err)
		}
	}
	got := map[int]int{}
	rows, err := l.DB().QueryContext(ctx, `SELECT i, saw0 FROM g`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var i, saw int
		if err := rows.Scan(&i, &saw); err != nil {
			t.Fatal(err)
		}
		got[i] = saw
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Write 1 ran in write 0's transaction (it did not see its row);
	// write 3, not synced, after its commit; write 2 left nothing.
	if want := map[int]int{0: 0, 1: 0, 3: 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows (i: saw write 0's row) = %v, want %v", got, want)
	}
}

// TestLedgerGroupCommitLateWritePanics: a late write whose body panics
// (in the leader's goroutine, which runs it) rolls the group back, and
// every write the group took, late ones included, gets an answer: none
// is left waiting. The ledger takes writes again afterwards.
func TestLedgerGroupCommitLateWritePanics(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE g(i INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	running, release := make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // a test that gives up frees write 0 first, and so the ledger's Close
	errs := make([]error, 3)
	var panicked any
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // write 0 leads, and holds its transaction open
		defer wg.Done()
		defer func() { panicked = recover() }()
		errs[0] = idem.LedgerOwnWrite(ctx, l, true, func(exec func(string, ...any) error) error {
			close(running)
			<-release
			return exec(`INSERT INTO g(i) VALUES(0)`)
		})
	}()
	testwait.Recv(t, running, "write 0 to run its statements")
	for i := 1; i <= 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = idem.LedgerOwnWrite(ctx, l, true, func(exec func(string, ...any) error) error {
				if err := exec(`INSERT INTO g(i) VALUES(?)`, i); err != nil {
					return err
				}
				if i == 1 {
					panic("write 1 panics")
				}
				return nil
			})
		}()
	}
	testwait.Until(t, func() bool { return idem.LedgerGroupPending(l) == 2 }, "writes 1 and 2 to wait in the ledger's group")
	free()
	testwait.Group(t, &wg, "the three writes to return (write 0's with write 1's panic)")
	if panicked != "write 1 panics" {
		t.Errorf("the leader's goroutine recovered %v, want write 1's panic", panicked)
	}
	for i, err := range errs[1:] {
		if err == nil {
			t.Errorf("write %d: nil, want an error (its group was rolled back)", i+1)
		}
	}
	var n int
	if err := l.DB().QueryRowContext(ctx, `SELECT count(*) FROM g`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rows committed, want none (the group was rolled back)", n)
	}
	if err := idem.LedgerOwnWrite(ctx, l, true, func(exec func(string, ...any) error) error {
		return exec(`INSERT INTO g(i) VALUES(3)`)
	}); err != nil {
		t.Errorf("a write after the panic: %v", err)
	}
}

// batchRecorder holds the rows of each batched statement the ledger runs
// (SetBatchHook) while the test runs.
type batchRecorder struct {
	mu   sync.Mutex
	rows []int
}

func recordBatches(t *testing.T) *batchRecorder {
	r := &batchRecorder{}
	t.Cleanup(idem.SetBatchHook(func(rows int) { r.mu.Lock(); r.rows = append(r.rows, rows); r.mu.Unlock() }))
	return r
}

// take returns the rows recorded since the last take.
func (r *batchRecorder) take() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	rows := r.rows
	r.rows = nil
	return rows
}

// TestLedgerGroupBatches: claims and done marks that wait in a group
// together go as one statement per kind (SetBatchHook counts their rows),
// and each gets the answer it would get alone: a new key acquired, a done
// key done, the second claim of a key in the group (run alone, after the
// batch) busy; a done mark of a lost attempt LeaseLost, the others done.
// A batched statement that fails (a trigger refuses one key) is rolled
// back, and its writes run alone: only the refused one fails.
func TestLedgerGroupBatches(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	s := store(t, l)
	batches := recordBatches(t)
	now := time.Now()
	done := idem.Key{Job: "b", Period: "done"}
	if err := l.Run(ctx, done, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DB().ExecContext(ctx, `CREATE TRIGGER refuse BEFORE INSERT ON idem_runs WHEN NEW.period = 'refused'
		BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	keys := []idem.Key{{Job: "b", Period: "p0"}, {Job: "b", Period: "p1"}, done, {Job: "b", Period: "p2"}, {Job: "b", Period: "p1"}, {Job: "b", Period: "p3"}}
	claims := make([]idemstore.Claim, len(keys))
	errs := grouped(t, l, len(keys), func(i int) error {
		var err error
		claims[i], err = s.Claim(ctx, idemstore.ClaimRequest{Key: keys[i], Owner: fmt.Sprint("w", i), Now: now, Lease: time.Minute, Durable: true})
		return err
	})
	wantState := []idemstore.ClaimState{idemstore.ClaimAcquired, idemstore.ClaimAcquired, idemstore.ClaimDone, idemstore.ClaimAcquired, idemstore.ClaimBusy, idemstore.ClaimAcquired}
	for i, c := range claims {
		if errs[i] != nil || c.State != wantState[i] {
			t.Errorf("claim %d of %s: %+v, %v; want state %v", i, keys[i], c, errs[i], wantState[i])
		}
	}
	if batched := batches.take(); len(batched) == 0 || batched[0] < 2 {
		t.Errorf("batched statements %v: want the claims in one", batched)
	}
	// Done marks: p0, p1 and p3 by their attempts, p2 by a lost one.
	ends := []struct {
		key     idem.Key
		attempt int64
		lost    bool
	}{{keys[0], 1, false}, {keys[1], 1, false}, {keys[3], 2, true}, {keys[5], 1, false}}
	errs = grouped(t, l, len(ends), func(i int) error {
		return s.Finish(ctx, ends[i].key, ends[i].attempt, idemstore.End{Status: idem.StatusDone, Now: now})
	})
	for i, e := range ends {
		switch {
		case e.lost && !errors.Is(errs[i], idem.ErrLeaseLost):
			t.Errorf("done mark of %s attempt %d: %v, want ErrLeaseLost", e.key, e.attempt, errs[i])
		case !e.lost && errs[i] != nil:
			t.Errorf("done mark of %s: %v", e.key, errs[i])
		}
		want := idem.StatusDone
		if e.lost {
			want = idem.StatusRunning
		}
		if rec := mustLookup(t, l, e.key); rec.Status != want {
			t.Errorf("%s after the group: %s, want %s", e.key, rec.Status, want)
		}
	}
	if batched := batches.take(); len(batched) == 0 || batched[0] < 2 {
		t.Errorf("batched statements %v: want the done marks in one", batched)
	}
	// A batch one of whose rows a trigger refuses.
	refused := []idem.Key{{Job: "b", Period: "q0"}, {Job: "b", Period: "refused"}, {Job: "b", Period: "q1"}}
	errs = grouped(t, l, len(refused), func(i int) error {
		_, err := s.Claim(ctx, idemstore.ClaimRequest{Key: refused[i], Owner: "w", Now: now, Lease: time.Minute, Durable: true})
		return err
	})
	for i, k := range refused {
		_, found, err := s.Lookup(ctx, k)
		switch {
		case err != nil:
			t.Fatal(err)
		case k.Period == "refused" && (errs[i] == nil || !strings.Contains(errs[i].Error(), "refused by the test") || found):
			t.Errorf("claim of %s: %v (record %v), want the trigger's error and no record", k, errs[i], found)
		case k.Period != "refused" && (errs[i] != nil || !found):
			t.Errorf("claim of %s: %v (record %v), want it acquired", k, errs[i], found)
		}
	}
}

// grouped runs n calls of call (i = 0..n-1) while l's writes are held,
// once all wait in its group, so that their writes form one group in
// the order of i; it returns their errors.
func grouped(t *testing.T, l *idem.Ledger, n int, call func(i int) error) []error {
	t.Helper()
	release := idem.LedgerHoldWrites(l)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call(i)
		}()
		// One at a time, so that the group holds them in the order of i.
		testwait.Until(t, func() bool { return idem.LedgerGroupPending(l) == i+1 }, "write %d to wait in the ledger's group", i)
	}
	release()
	testwait.Group(t, &wg, "the %d grouped writes to return", n)
	return errs
}

// TestLedgerGroupBatchEndsTransaction: a batched statement whose failure
// ends the transaction (a trigger's RAISE(ROLLBACK), as a full disk can)
// fails every write of the group with an error, and none of them is left
// written: no write runs on after it outside the group's transaction.
// The ledger writes again afterwards.
func TestLedgerGroupBatchEndsTransaction(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	s := store(t, l)
	batches := recordBatches(t)
	if _, err := l.DB().ExecContext(ctx, `CREATE TRIGGER roll BEFORE INSERT ON idem_runs WHEN NEW.period = 'roll'
		BEGIN SELECT RAISE(ROLLBACK, 'rolled back by the test'); END`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	keys := []idem.Key{{Job: "b", Period: "r0"}, {Job: "b", Period: "roll"}, {Job: "b", Period: "r1"}}
	errs := grouped(t, l, len(keys), func(i int) error {
		_, err := s.Claim(ctx, idemstore.ClaimRequest{Key: keys[i], Owner: "w", Now: now, Lease: time.Minute, Durable: true})
		return err
	})
	if len(batches.take()) == 0 {
		t.Errorf("no batched statement: the claims did not go as one")
	}
	for i, k := range keys {
		if errs[i] == nil {
			t.Errorf("claim of %s: nil, want the group's error", k)
		}
		if _, found, err := s.Lookup(ctx, k); err != nil || found {
			t.Errorf("%s after the group: record %v (%v), want none", k, found, err)
		}
	}
	k := idem.Key{Job: "b", Period: "after"}
	if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("a Run after the failed group: %v", err)
	}
}
