package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

// holdWriteLock opens another handle on the ledger file at path (its own
// *sql.DB, as a backup tool or the application's own code would) and takes
// the database's write lock with BEGIN EXCLUSIVE. release ends that
// transaction; it is also called when t ends.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	lock, release := writeLockHandle(t, path)
	if err := lock(); err != nil {
		t.Fatal(err)
	}
	return release
}

// writeLockHandle opens that other handle; lock (safe to call from any
// goroutine) takes the lock, release gives it back.
func writeLockHandle(t *testing.T, path string) (lock func() error, release func()) {
	t.Helper()
	u := url.URL{Scheme: "file", Path: path}
	db, err := sql.Open("sqlite", "file:"+u.EscapedPath()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	held := false
	lock = func() error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := conn.ExecContext(context.Background(), `BEGIN EXCLUSIVE`); err != nil {
			return fmt.Errorf("another handle's BEGIN EXCLUSIVE on %s: %w", path, err)
		}
		held = true
		return nil
	}
	release = func() {
		mu.Lock()
		defer mu.Unlock()
		if held {
			held = false
			if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
				t.Errorf("ROLLBACK of the other handle: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		release()
		conn.Close()
		db.Close()
	})
	return lock, release
}

// TestLedgerClaimLeaseCountsFromWrite: a claim that waited for SQLite's
// write lock (another handle held BEGIN EXCLUSIVE for 4 s on the ledger's
// clock) writes a lease that counts from when the claim is written, not
// from when the claim was asked for: A's fn starts with its lease live
// (CheckLease passes, the record's lease_until is ahead of the clock), and
// B, asking for the same key 0.3 s later, finds it in progress and does
// not run fn while A's runs.
func TestLedgerClaimLeaseCountsFromWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	clk := idemtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := openLedger(t, dir, idem.WithClock(clk))
	ctx := context.Background()
	key := idem.Key{Job: "lock", Period: "p1"}
	const lease = 3 * time.Second

	release := holdWriteLock(t, path)
	type started struct{ checkLease error }
	startedA, finishA := make(chan started, 1), make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		doneA <- l.Run(ctx, key, func(ctx context.Context) error {
			startedA <- started{idem.CheckLease(ctx)}
			<-finishA
			return nil
		}, idem.WithLease(lease), idem.AtMostOnce())
	}()
	// Only once A's claim found the database locked does it wait for the
	// lock (queued, it could still be about to try: then it would not wait).
	testwait.Until(t, func() bool { return idem.LedgerLockBlocked(l) > 0 }, "A's claim to find the database locked by the other handle")
	clk.Advance(4 * time.Second) // the other writer holds the lock 4 s
	release()

	a := testwait.Recv(t, startedA, "A's fn to start")
	if a.checkLease != nil {
		t.Errorf("A's fn started with its lease already run out: CheckLease = %v", a.checkLease)
	}
	rec, ok, err := l.Lookup(ctx, key)
	if err != nil || !ok {
		t.Fatalf("Lookup(%s) = %v, %v", key, ok, err)
	}
	if !rec.LeaseUntil.After(clk.Now()) {
		t.Errorf("A's claim wrote lease_until %v, not after the time it was written (%v): its lease had run out as it began",
			rec.LeaseUntil, clk.Now())
	}

	clk.Advance(300 * time.Millisecond)
	var ranB atomic.Bool
	errB := l.Run(ctx, key, func(context.Context) error { ranB.Store(true); return nil },
		idem.WithLease(lease), idem.AtMostOnce())
	if ranB.Load() {
		t.Errorf("B's fn ran while A's fn was running")
	}
	if !errors.Is(errB, idem.ErrInProgress) {
		t.Errorf("B's Run at +4.3 s = %v, want ErrInProgress (A holds the key)", errB)
	}
	close(finishA)
	if err := testwait.Recv(t, doneA, "A's Run to return"); err != nil {
		t.Fatalf("A's Run: %v", err)
	}
	if rec, _, _ := l.Lookup(ctx, key); rec.Status != idem.StatusDone {
		t.Errorf("after A: %s is %s, want done", key, rec.Status)
	}
}

// TestLedgerWriteLockWaitBounded: while another handle holds the write
// lock, a claim, a lease renewal and a done mark wait at most WithLockWait
// (with a context that never ends, as a Scheduler's), then fail with an
// error matching ErrWriteLockHeld that names the ledger's path; nothing is
// written, so the key is as it was: no record after the failed claim, still
// running after the failed renewal and done mark (a Run whose done mark
// failed does not report success), and done once the lock is free.
func TestLedgerWriteLockWaitBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l := openLedger(t, dir, idem.WithLockWait(100*time.Millisecond))
	ctx := context.Background()
	// bounded runs f with a context that never ends and waits for its
	// answer (testwait's limit at most: a write that waits for the lock
	// without bound fails the test there).
	bounded := func(what string, f func() error) error {
		t.Helper()
		ch := make(chan error, 1)
		go func() { ch <- f() }()
		return testwait.Recv(t, ch, "%s to return while the write lock is held elsewhere", what)
	}
	checkErr := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, idem.ErrWriteLockHeld) {
			t.Fatalf("%s with the write lock held elsewhere = %v, want an error matching ErrWriteLockHeld", what, err)
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "write lock") {
			t.Errorf("%s: error %q does not name the ledger %s and its write lock", what, err, path)
		}
	}

	// A Run's claim.
	fresh := idem.Key{Job: "lock", Period: "fresh"}
	release := holdWriteLock(t, path)
	ran := false
	err := bounded("Run's claim", func() error {
		return l.Run(ctx, fresh, func(context.Context) error { ran = true; return nil }, idem.AtMostOnce())
	})
	checkErr("Run's claim", err)
	if ran {
		t.Errorf("fn ran though its claim failed")
	}
	if rec, ok, err := l.Lookup(ctx, fresh); err != nil || ok {
		t.Errorf("after the failed claim: Lookup = %+v, %v, %v; want no record", rec, ok, err)
	}
	release()

	// A renewal and a done mark of a claimed attempt.
	held := idem.Key{Job: "lock", Period: "held"}
	c, err := store(t, l).Claim(ctx, idemstore.ClaimRequest{Key: held, Owner: "test", Now: time.Now(), Lease: time.Minute, Durable: true})
	if err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("Claim(%s) = %+v, %v", held, c, err)
	}
	release = holdWriteLock(t, path)
	checkErr("Renew", bounded("Renew", func() error { return store(t, l).Renew(ctx, held, c.Attempt, time.Now(), time.Minute) }))
	checkErr("Finish", bounded("Finish", func() error {
		return store(t, l).Finish(ctx, held, c.Attempt, idemstore.End{Status: idem.StatusDone, Now: time.Now()})
	}))
	if rec, _, err := l.Lookup(ctx, held); err != nil || rec.Status != idem.StatusRunning {
		t.Errorf("after the failed done mark: %s is %q (%v), want running", held, rec.Status, err)
	}
	release()
	if err := store(t, l).Finish(ctx, held, c.Attempt, idemstore.End{Status: idem.StatusDone, Now: time.Now()}); err != nil {
		t.Fatalf("Finish once the lock is free: %v", err)
	}

	// A Run whose done mark cannot be written: not reported as success.
	key := idem.Key{Job: "lock", Period: "done-mark"}
	lock, rel := writeLockHandle(t, path)
	err = bounded("Run's done mark", func() error {
		return l.Run(ctx, key, func(context.Context) error {
			return lock() // taken as fn ends: the done mark waits
		}, idem.AtLeastOnce())
	})
	checkErr("Run's done mark", err)
	if rec, _, err := l.Lookup(ctx, key); err != nil || rec.Status == idem.StatusDone {
		t.Errorf("after the failed done mark: %s is %q (%v), want not done", key, rec.Status, err)
	}
	rel()
}

// TestLedgerIdleOutboxClaimWritesNothing: a relay's claim of outbox
// messages when none is due (an idle relay's every pass) writes nothing,
// so it neither waits for the write lock nor takes it from the writers
// that have work: with another handle holding the lock it returns at once,
// with no message.
func TestLedgerIdleOutboxClaimWritesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLedger(t, dir)
	holdWriteLock(t, filepath.Join(dir, "ledger.db"))
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit(t))
	defer cancel()
	msgs, err := store(t, l).ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: 4, Owner: "relay", Now: time.Now(), Lease: time.Minute})
	if err != nil || len(msgs) != 0 {
		t.Fatalf("ClaimOutbox of an empty outbox with the write lock held elsewhere = %v, %v; want nothing, at once", msgs, err)
	}
}

// TestLedgerDoneKeyWhileLockHeldAfterNewKeys: after a run of new keys,
// when a claim tries the claim's transaction before any read, a done key
// is still answered AlreadyDone, by Run and by RunTx, without waiting for
// the write lock that another handle holds (WithLockWait is an hour: a
// claim that waited for it fails the test at testwait's limit). The
// transaction is tried only if it can start at once.
func TestLedgerDoneKeyWhileLockHeldAfterNewKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLedger(t, dir, idem.WithLockWait(time.Hour))
	ctx := context.Background()
	done := idem.Key{Job: "streak", Period: "done"}
	txDone := idem.Key{Job: "streak", Period: "tx-done"}
	if err := l.RunTx(ctx, txDone, func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	afterNewKeys(t, l, done)
	holdWriteLock(t, filepath.Join(dir, "ledger.db"))
	ran := func(context.Context) error { return errors.New("fn ran for a done key") }
	for _, c := range []struct {
		what string
		run  func(*idem.Result) error
	}{
		{"Run", func(res *idem.Result) error { return l.Run(ctx, done, ran, idem.ReportTo(res)) }},
		{"RunTx", func(res *idem.Result) error {
			return l.RunTx(ctx, txDone, func(ctx context.Context, _ *sql.Tx) error { return ran(ctx) }, idem.ReportTo(res))
		}},
	} {
		var res idem.Result
		ch := make(chan error, 1)
		go func() { ch <- c.run(&res) }()
		err := testwait.Recv(t, ch, "%s of a done key to return while another handle holds the write lock", c.what)
		if err != nil || res.Outcome != idem.AlreadyDone {
			t.Errorf("%s of a done key with the write lock held elsewhere = %v, outcome %v; want nil, AlreadyDone", c.what, err, res.Outcome)
		}
	}
}

// TestLedgerDoneKeyWhileRunTxFnRunsAfterNewKeys: after a run of new keys, a
// claim that goes to the claim's transaction first waits for its turn
// behind this process's own short writes only: with a RunTx's fn running
// in its transaction (which holds the turn), a Run of a done key is
// answered AlreadyDone at once, not when that fn ends (WithLockWait is an
// hour: a claim that waited fails the test at testwait's limit).
func TestLedgerDoneKeyWhileRunTxFnRunsAfterNewKeys(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir(), idem.WithLockWait(time.Hour))
	ctx := context.Background()
	done := idem.Key{Job: "streak", Period: "done"}
	afterNewKeys(t, l, done)
	inFn, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	txErr := make(chan error, 1)
	go func() {
		txErr <- l.RunTx(ctx, idem.Key{Job: "streak", Period: "slow-tx"}, func(context.Context, *sql.Tx) error {
			close(inFn)
			<-release
			return nil
		})
	}()
	testwait.Recv(t, inFn, "the RunTx's fn to start")
	var res idem.Result
	ch := make(chan error, 1)
	go func() {
		ch <- l.Run(ctx, done, func(context.Context) error { return errors.New("fn ran for a done key") }, idem.ReportTo(&res))
	}()
	err := testwait.Recv(t, ch, "Run of a done key to return while a RunTx's fn holds the turn to write")
	free()
	if err != nil || res.Outcome != idem.AlreadyDone {
		t.Errorf("Run of a done key while a RunTx's fn runs = %v, outcome %v; want nil, AlreadyDone", err, res.Outcome)
	}
	if err := testwait.Recv(t, txErr, "the RunTx to end once its fn returned"); err != nil {
		t.Errorf("RunTx: %v", err)
	}
}

// afterNewKeys runs done and four new keys on l, and checks that l's next
// claim goes to the claim's transaction first.
func afterNewKeys(t *testing.T, l *idem.Ledger, done idem.Key) {
	t.Helper()
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	for i := range 5 {
		key := idem.Key{Job: "streak", Period: fmt.Sprintf("new-%d", i)}
		if i == 0 {
			key = done
		}
		if err := l.Run(ctx, key, noop); err != nil {
			t.Fatal(err)
		}
	}
	if idem.LedgerReadsFirst(l) {
		t.Fatal("after four new keys the ledger still reads before it claims: this test would not try the claim's transaction first")
	}
}
