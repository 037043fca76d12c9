package mysqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// TestRunTxDuplicateReadsFirst: once a RunTx found its key recorded, the
// next RunTx reads the key first, without a lock: a duplicate trigger of a
// done key is answered at once, even while another transaction holds the
// key's row (a fresh RunTx's INSERT would wait for that row's lock to
// check the duplicate). A new key after it still runs in one transaction.
func TestRunTxDuplicateReadsFirst(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	l := openLedger(t, db)
	ctx := context.Background()
	noop := func(context.Context, *sql.Tx) error { return nil }
	k1, k2 := idem.Key{Job: "settle", Period: "2026-12-01"}, idem.Key{Job: "settle", Period: "2026-12-02"}
	for _, k := range []idem.Key{k1, k2, k1} { // the last one is a duplicate
		if err := l.RunTx(ctx, k, noop); err != nil {
			t.Fatalf("RunTx %s: %v", k, err)
		}
	}
	// Another transaction holds k2's row until the test ends.
	holder, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	var status string
	if err := holder.QueryRowContext(ctx, "SELECT status FROM "+l.Table("runs")+" WHERE job = ? AND period = ? FOR UPDATE", k2.Job, k2.Period).Scan(&status); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var res idem.Result
	ran := false
	err = l.RunTx(wctx, k2, func(context.Context, *sql.Tx) error { ran = true; return nil }, idem.ReportTo(&res))
	if err != nil || ran || res.Outcome != idem.AlreadyDone {
		t.Fatalf("a duplicate RunTx of %s while another transaction holds its row: outcome %v, fn ran %v, err %v; want AlreadyDone at once", k2, res.Outcome, ran, err)
	}
	if errors.Is(wctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the duplicate RunTx waited 10 s for the row's lock")
	}
	holder.Rollback()
	k3 := idem.Key{Job: "settle", Period: "2026-12-03"}
	if err := l.RunTx(ctx, k3, noop, idem.ReportTo(&res)); err != nil || res.Outcome != idem.Ran {
		t.Fatalf("RunTx of a new key after duplicates: outcome %v, err %v", res.Outcome, err)
	}
}

// TestFreshRunStatements: while the keys run are new, a Run's claim is
// one statement (the INSERT of attempt 1's row, no read before it), and a
// fresh Run is two in all, as the hand-written floor's; after a duplicate
// trigger the next claim reads first (one read, no write). Counted by the
// server, on the one connection the ledger's pool has.
func TestFreshRunStatements(t *testing.T) {
	t.Parallel()
	l, counted := openCountedLedger(t)
	ctx := context.Background()
	run := func(period string) map[string]int {
		t.Helper()
		return counted(func() {
			if err := l.Run(ctx, idem.Key{Job: "settle", Period: period}, func(context.Context) error { return nil }); err != nil {
				t.Fatalf("Run %s: %v", period, err)
			}
		})
	}
	run("2026-12-01")
	if d := run("2026-12-02"); len(d) != 2 || d["Com_insert_select"] != 1 || d["Com_update"] != 1 {
		t.Errorf("a fresh Run after a fresh Run: statements %v; want one INSERT … SELECT (the claim) and one UPDATE (the done mark)", d)
	}
	run("2026-12-02") // a duplicate: the next claim reads first
	if d := run("2026-12-02"); len(d) != 1 || d["Com_select"] != 1 {
		t.Errorf("a duplicate Run after a duplicate: statements %v; want one SELECT", d)
	}
}

// TestMarkFreshGivesUpOnAHeldRow: MarkFresh of a key whose row another
// transaction holds (a RunTx of the same key, its fn still running) does
// not wait for that transaction's end: it returns an error (InnoDB's lock
// wait timeout, one second for that statement) and writes nothing; the
// RunTx then commits its own record. The sessions' own lock wait is an
// hour here: only the statement's own bound ends the wait.
func TestMarkFreshGivesUpOnAHeldRow(t *testing.T) {
	t.Parallel()
	db := openDBWith(t, func(c *mysql.Config) {
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params["innodb_lock_wait_timeout"] = "3600"
	})
	l := openLedger(t, db)
	ctx := context.Background()
	key := idem.Key{Job: "fanout", Period: "2026-12-01"}
	inFn, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // a test that gives up frees RunTx first, and so MarkFresh and the pool's Close
	ran := make(chan error, 1)
	go func() {
		ran <- l.RunTx(ctx, key, func(context.Context, *sql.Tx) error {
			close(inFn)
			<-release
			return nil
		})
	}()
	testwait.Recv(t, inFn, "RunTx's fn to start")
	done := make(chan error, 1)
	go func() {
		ok, err := l.MarkFresh(ctx, idemstore.ClaimRequest{Key: key, Owner: "marker", Now: time.Now(), Lease: time.Minute})
		if err == nil {
			err = fmt.Errorf("MarkFresh of a key whose row a RunTx holds: %v and no error; want an error", ok)
		} else if !strings.Contains(err.Error(), "Lock wait timeout") {
			err = fmt.Errorf("MarkFresh's error %q does not say it gave up waiting for the row's lock", err)
		} else {
			err = nil
		}
		done <- err
	}()
	if err := testwait.Recv(t, done, "MarkFresh to give up waiting for the row RunTx holds (RunTx's fn is still running)"); err != nil {
		t.Error(err)
	}
	free()
	if err := testwait.Recv(t, ran, "RunTx to return"); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := l.Lookup(ctx, key)
	if err != nil || !ok || rec.Status != idemstore.StatusDone || rec.Owner == "marker" {
		t.Fatalf("the key's record after RunTx: %+v, found %v, err %v; want RunTx's done mark", rec, ok, err)
	}
}
