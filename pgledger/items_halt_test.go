package pgledger_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// lockedClaims is an item store whose first FinishItems fails (before
// the store) and whose second ClaimItems waits on the server: before it is
// sent, once the first claim has come back, a transaction of the test
// takes item_chunks in EXCLUSIVE mode, and lets it go when that
// FinishItems fails.
type lockedClaims struct {
	idemstore.ItemStore
	t      *testing.T
	l      *pgledger.Ledger
	mu     sync.Mutex
	claims int
	first  chan struct{} // closed when the first claim came back
	lock   pgx.Tx        // holds the table lock
	failed bool
}

var errFinish = errors.New("finish failed: connection reset")

func (s *lockedClaims) ClaimItems(ctx context.Context, key idem.Key, req idemstore.ItemClaimRequest) (idemstore.ItemBatch, error) {
	s.mu.Lock()
	s.claims++
	n := s.claims
	s.mu.Unlock()
	switch n {
	case 1:
		defer close(s.first)
	case 2:
		<-s.first
		tx, err := s.l.Pool().Begin(context.Background())
		if err != nil {
			s.t.Errorf("lock item_chunks: %v", err)
			return idemstore.ItemBatch{}, err
		}
		// Let go at the latest when the test ends (a test that gave up).
		s.t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck // committed already, most often
		if _, err := tx.Exec(context.Background(), `LOCK TABLE `+table(s.l, "item_chunks")+` IN EXCLUSIVE MODE`); err != nil {
			s.t.Errorf("lock item_chunks: %v", err)
			return idemstore.ItemBatch{}, err
		}
		s.mu.Lock()
		s.lock = tx
		s.mu.Unlock()
	}
	return s.ItemStore.ClaimItems(ctx, key, req)
}

func (s *lockedClaims) FinishItems(ctx context.Context, key idem.Key, step idemstore.ItemStep, ends []idemstore.ItemEnd) ([]string, error) {
	s.mu.Lock()
	fail := !s.failed
	s.failed = true
	tx := s.lock
	s.mu.Unlock()
	if !fail {
		return s.ItemStore.FinishItems(ctx, key, step, ends)
	}
	if tx != nil {
		if err := tx.Commit(context.Background()); err != nil {
			s.t.Errorf("let item_chunks go: %v", err)
		}
	}
	return nil, errFinish
}

// backends counts the server's backends, other than the asker's, that
// run a statement on l's schema (waiting is true: that wait for a
// lock).
func backends(l *pgledger.Ledger, waiting bool) (int, error) {
	var n int
	err := l.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND state = 'active' AND ($2 = false OR wait_event_type = 'Lock')
		AND position($1 in query) > 0`, l.Schema(), waiting).Scan(&n)
	return n, err
}

// TestEachWorkerErrorAbandonsNoClaim: a worker's store error does not
// cancel another worker's claim on its way to the server. Here the second
// worker's claim waits for a lock on item_chunks when the first worker's
// done marks fail, and the lock is let go right then. Cancelled, as it
// was, pgx gave up on the claim and the server applied it after Each
// returned: its chunk was held for a lease with no one working it (the
// items model waited on such a chunk until its step limit). Now the
// claim's reply comes back, and its worker hands back what it did not
// start: once no statement runs, every item is done or claimable at once
// but those of the chunk whose done marks failed, held for its lease as
// after a crash.
func TestEachWorkerErrorAbandonsNoClaim(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	s := &lockedClaims{ItemStore: st.(idemstore.ItemStore), t: t, l: l, first: make(chan struct{})}
	var once sync.Once
	limit, cancel := context.WithTimeout(context.Background(), testwait.Limit(t)) // a call that hangs fails
	defer cancel()
	res, err := idem.Each(limit, s, points, accounts(40), func(ctx context.Context, item string) error {
		var werr error
		once.Do(func() { werr = waitClaimBlocked(t, l) }) // the first item waits for the second claim
		return werr
	}, idem.AtLeastOnce(), idem.WithWorkers(2), idem.WithBatch(1))
	if !errors.Is(err, errFinish) || res.Outcome != idem.Failed {
		t.Fatalf("Each whose first done marks fail: %v, outcome %s; want the store's error, Failed", err, res.Outcome)
	}
	testwait.Until(t, func() bool {
		n, err := backends(l, false)
		return err == nil && n == 0
	}, "no statement on %s", table(l, "item_chunks"))
	c, err := l.CountItems(context.Background(), points)
	if err != nil {
		t.Fatal(err)
	}
	rest := testledger.ClaimAll(t, l, points, time.Time{}) // on the server's clock
	for _, it := range rest {
		if it.Doubt {
			t.Fatalf("claimable after the call: %+v; want items that did not run, not in doubt", it)
		}
	}
	// 40 items in two chunks of 20: the first worker's is held.
	if held := 40 - int(c.Done) - len(rest); held != 20 {
		t.Fatalf("counts %+v, %d claimable: %d items held; want 20, the chunk whose done marks failed", c, len(rest), held)
	}
}

// waitClaimBlocked waits until a claim waits for the lock on l's
// item_chunks (in a goroutine other than the test's: an error after
// testwait's limit).
func waitClaimBlocked(t *testing.T, l *pgledger.Ledger) error {
	deadline := time.Now().Add(testwait.Limit(t))
	for {
		n, err := backends(l, true)
		if err != nil || n > 0 {
			return err
		}
		if time.Now().After(deadline) {
			t.Errorf("no claim waited for the lock on %s; goroutines:\n%s", table(l, "item_chunks"), testwait.Goroutines())
			return errors.New("gave up")
		}
		time.Sleep(time.Millisecond)
	}
}
