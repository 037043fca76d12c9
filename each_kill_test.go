//go:build !race

// The multi-process fan-out tests apply 10k items through SQLite in child
// processes; under the race detector (instrumented transpiled SQLite) they
// take minutes, so scripts/test.sh runs them in a separate pass without it.

package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/effectlog"
)

// eachChild is the job of the multi-process fan-out tests: 10k items in
// tx or two-phase mode, killed when the process has applied killAt items.
func eachChild(dir, mode string, killAt int64, workers int) error {
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return err
	}
	defer l.Close()
	ctx := context.Background()
	var applied atomic.Int64
	maybeKill := func() {
		if applied.Add(1) == killAt {
			idemtest.Kill()
		}
	}
	fanOut := idem.WithWorkers(workers)
	opts := []idem.Option{idem.WithLease(500 * time.Millisecond),
		idem.WithBackoff(idem.MaxAttempts(3, idem.Constant(time.Millisecond)))}
	poison := func(item string) error {
		if item == "acct-004242" {
			return errors.New("account frozen")
		}
		return nil
	}
	if mode == "tx" {
		_, err = idem.EachTx(ctx, l, points, accounts(10000), func(ctx context.Context, tx *sql.Tx, item string) error {
			if err := poison(item); err != nil {
				return err
			}
			maybeKill()
			_, err := tx.ExecContext(ctx, `INSERT INTO granted VALUES(?, 1) ON CONFLICT DO UPDATE SET n = n + 1`, item)
			return err
		}, fanOut, opts[0], opts[1])
		return err
	}
	log, err := os.OpenFile(filepath.Join(dir, "effects.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	has := func(ctx context.Context, _ idem.Key) (bool, error) {
		info, _ := idem.InfoFrom(ctx)
		return newEffects(dir).Counts(nil)[info.Item] > 0, nil
	}
	_, err = idem.Each(ctx, l, points, accounts(10000), func(ctx context.Context, item string) error {
		if err := poison(item); err != nil {
			return idem.NothingHappened(err)
		}
		// A SIGKILL loses nothing written: no fsync needed to survive it;
		// a write it cuts short is no record (effectlog).
		if err := effectlog.Append(log, item); err != nil {
			return err
		}
		maybeKill()
		return nil
	}, fanOut, opts[0], opts[1], idem.TwoPhase(has))
	return err
}

func prepareGranted(t *testing.T, dir string) {
	l := openLedger(t, dir)
	if _, err := l.DB().Exec(`CREATE TABLE IF NOT EXISTS granted(item TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// appliedCounts is how often each item took effect: the granted table's
// counters in tx mode, the effects log's lines otherwise.
func appliedCounts(t *testing.T, dir, mode string) map[string]int {
	t.Helper()
	if mode != "tx" {
		return newEffects(dir).Counts(t)
	}
	return grantedCounts(t, openLedger(t, dir).DB())
}

// grantedCounts is the granted table's counters in db, by item.
func grantedCounts(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT item, n FROM granted`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var it string
		var n int
		if err := rows.Scan(&it, &n); err != nil {
			t.Fatal(err)
		}
		got[it] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkGranted verifies every item but the poison one was applied exactly
// once and the poison one is parked.
func checkGranted(t *testing.T, dir, mode string) {
	t.Helper()
	got := appliedCounts(t, dir, mode)
	if len(got) != 9999 {
		t.Fatalf("%d items applied, want 9999", len(got))
	}
	for it, n := range got {
		if n != 1 {
			t.Fatalf("%s applied %d times", it, n)
		}
	}
	l := openLedger(t, dir)
	c, err := l.CountItems(context.Background(), points)
	if err != nil || c.Parked != 1 || c.Done != 9999 {
		t.Fatalf("counts %+v, %v", c, err)
	}
	if rec := mustLookup(t, l, points); rec.Status != idem.StatusDone {
		t.Fatalf("period %+v", rec)
	}
}

// TestEachKilled applies 10k items, SIGKILLing the process at 30 %, 60 % and
// 90 % (one kill per run, each run resuming the last), then finishes.
func TestEachKilled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10k items with real kills")
	}
	for _, mode := range []string{"tx", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			prepareGranted(t, dir)
			for _, pct := range []int64{30, 60, 90} {
				exit := idemtest.Fork(t, dir+"|"+strconv.FormatInt(pct, 10), func(arg string) {
					d, p := filepath.Dir(arg+"/x"), arg
					for i := len(arg) - 1; i >= 0; i-- {
						if arg[i] == '|' {
							d, p = arg[:i], arg[i+1:]
							break
						}
					}
					pct, _ := strconv.ParseInt(p, 10, 64)
					// Kill when the whole period reaches pct: this run does what is left.
					l, _ := idem.OpenLedger(filepath.Join(d, "ledger.db"))
					c, _ := l.CountItems(context.Background(), points)
					l.Close()
					if err := eachChild(d, mode, pct*100-c.Done, 2); err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
				})
				if !exit.Killed {
					t.Fatalf("run to %d%% was not killed: %+v", pct, exit)
				}
				time.Sleep(600 * time.Millisecond) // the dead process's 500 ms leases expire
			}
			if err := eachChild(dir, mode, -1, 2); err != nil {
				t.Fatal(err)
			}
			checkGranted(t, dir, mode)
		})
	}
}

// TestEachFourProcesses shares 10k items between 4 processes at once.
func TestEachFourProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("4 processes, 10k items")
	}
	for _, mode := range []string{"tx", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			prepareGranted(t, dir)
			var children []*idemtest.Child
			for range 4 {
				children = append(children, idemtest.Start(t, dir, func(dir string) {
					if err := eachChild(dir, mode, -1, 2); err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
				}))
			}
			for i, c := range children {
				if e := c.Wait(); e.Killed || e.Code != 0 {
					t.Fatalf("process %d: %+v", i, e)
				}
			}
			checkGranted(t, dir, mode)
		})
	}
}
