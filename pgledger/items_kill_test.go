package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/effectlog"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The multi-process fan-out tests: 10k items applied through child
// processes (this test binary, re-executed), each with a pool of its own,
// as separate hosts would be, SIGKILLed mid-batch or sharing the items.

const (
	killItems = 10000
	poison    = "acct-004242" // fails on every attempt: parked after 3
)

// eachEnv is what a child needs to find the test's state: the ledger's
// schema (in the database named by IDEM_TEST_PG_DSN, which the child
// inherits) and a directory for the two-phase mode's effects log.
type eachEnv struct{ schema, dir string }

func (e eachEnv) arg(extra string) string { return e.schema + "|" + e.dir + "|" + extra }

func parseEnv(arg string) (eachEnv, string) {
	f := strings.SplitN(arg, "|", 3)
	return eachEnv{schema: f[0], dir: f[1]}, f[2]
}

// openChildLedger opens the test's ledger through a pool of its own.
func openChildLedger(ctx context.Context, env eachEnv) (*pgledger.Ledger, error) {
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		return nil, err
	}
	l, err := pgledger.New(ctx, pool, pgledger.WithSchema(env.schema))
	if err != nil {
		pool.Close()
		return nil, err
	}
	return l, nil
}

// eachChild runs the period's 10k items with Each (two-phase: the effect is
// a line in a log that DownstreamHas reads) or EachTx (tx: a row n = n + 1
// in the ledger's database, in the batch's transaction), SIGKILLing this
// process when it has applied killAt items (never if killAt <= 0).
func eachChild(env eachEnv, mode string, killAt int64) error {
	ctx := context.Background()
	l, err := openChildLedger(ctx, env)
	if err != nil {
		return err
	}
	defer l.Pool().Close()
	var applied atomic.Int64
	maybeKill := func() {
		if applied.Add(1) == killAt {
			idemtest.Kill()
		}
	}
	fanOut := idem.WithWorkers(2)
	opts := []idem.Option{idem.WithLease(500 * time.Millisecond),
		idem.WithBackoff(idem.MaxAttempts(3, idem.Constant(time.Millisecond)))}
	if mode == "tx" {
		granted := table(l, "granted")
		_, err = idem.EachTx(ctx, l, points, accounts(killItems), func(ctx context.Context, tx pgx.Tx, item string) error {
			if item == poison {
				return errors.New("account frozen")
			}
			maybeKill() // mid-transaction: the batch rolls back
			return grant(ctx, tx, granted, item)
		}, fanOut, opts[0], opts[1])
		return err
	}
	log, err := os.OpenFile(filepath.Join(env.dir, "effects.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	seen := effectlog.NewReader(filepath.Join(env.dir, "effects.log"))
	has := func(ctx context.Context, _ idem.Key) (bool, error) {
		info, _ := idem.InfoFrom(ctx)
		n, err := seen.Count(info.Item)
		return n > 0, err
	}
	_, err = idem.Each(ctx, l, points, accounts(killItems), func(ctx context.Context, item string) error {
		if item == poison {
			return idem.NothingHappened(errors.New("account frozen"))
		}
		if err := idem.CheckLease(ctx); err != nil {
			return idem.NothingHappened(err)
		}
		// One record, one write (O_APPEND): a SIGKILL loses nothing
		// written, so no fsync is needed to survive it, and a write it
		// cuts short is no record (effectlog).
		if err := effectlog.Append(log, item); err != nil {
			return err
		}
		maybeKill() // after the effect, before its done mark: in doubt
		return nil
	}, fanOut, opts[0], opts[1], idem.TwoPhase(has))
	return err
}

// newEachEnv creates the ledger (and the tx mode's business table) in a
// fresh schema, dropped when t ends.
func newEachEnv(t *testing.T) (eachEnv, *pgledger.Ledger) {
	l := openLedger(t, newPool(t))
	createGranted(t, l)
	return eachEnv{schema: l.Schema(), dir: t.TempDir()}, l
}

// checkApplied verifies that every item but the poison one was applied
// exactly once, that the poison one is parked, and that the period is done.
func checkApplied(t *testing.T, l *pgledger.Ledger, env eachEnv, mode string) {
	t.Helper()
	var got map[string]int
	if mode == "tx" {
		got = grantedCounts(t, l, table(l, "granted"))
	} else {
		var err error
		if got, err = effectlog.Counts(filepath.Join(env.dir, "effects.log")); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != killItems-1 || got[poison] != 0 {
		t.Fatalf("%d items applied (poison: %d), want %d and none; items not done: %s",
			len(got), got[poison], killItems-1, notDone(t, l))
	}
	for it, n := range got {
		if n != 1 {
			t.Fatalf("%s applied %d times", it, n)
		}
	}
	ctx := context.Background()
	c, err := l.CountItems(ctx, points)
	if err != nil || c.Parked != 1 || c.Done != killItems-1 || c.Total() != killItems {
		t.Fatalf("counts %+v, %v", c, err)
	}
	var status string
	if err := l.Pool().QueryRow(ctx, `SELECT status FROM `+table(l, "item_state")+` WHERE item = $1`, poison).Scan(&status); err != nil || status != "parked" {
		t.Fatalf("poison item %q, %v", status, err)
	}
	if rec, ok, err := l.Lookup(ctx, points); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("period %+v, %v, %v", rec, ok, err)
	}
}

// notDone describes the items that are not done, for a failure's message:
// those of chunks that are not settled, and the records of the others.
func notDone(t *testing.T, l *pgledger.Ledger) string {
	rows, err := l.Pool().Query(context.Background(), `(SELECT status, count(*)::int, min(item), left(last_error, 300) FROM `+table(l, "item_state")+`
		WHERE status <> 'done' GROUP BY status, left(last_error, 300) ORDER BY count(*) DESC LIMIT 5)
		UNION ALL
		(SELECT 'chunk ' || status, sum(n - settled)::int, 'chunk ' || min(chunk), '' FROM `+table(l, "item_chunks")+`
		WHERE status <> 'done' GROUP BY status)`)
	if err != nil {
		return err.Error()
	}
	var out []string
	var status, item, lastErr string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&status, &n, &item, &lastErr}, func() error {
		out = append(out, fmt.Sprintf("%d %s (first %s: %q)", n, status, item, lastErr))
		return nil
	})
	if err != nil {
		return err.Error()
	}
	return strings.Join(out, "; ")
}

// TestEachKilled applies 10k items, SIGKILLing the process at 30 %, 60 % and
// 90 % of the period (one kill per run, each run resuming the last), then
// finishes.
func TestEachKilled(t *testing.T) {
	testDSN(t)
	if testing.Short() {
		t.Skip("10k items with real kills")
	}
	for _, mode := range []string{"tx", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			if idemtest.IsChild(t) {
				idemtest.Start(t, "", func(arg string) { // does not return
					env, p := parseEnv(arg)
					pct, _ := strconv.ParseInt(p, 10, 64)
					// Kill when the whole period reaches pct: this run does what is left.
					l, err := openChildLedger(context.Background(), env)
					if err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
					c, err := l.CountItems(context.Background(), points)
					l.Pool().Close()
					if err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
					if err := eachChild(env, mode, pct*killItems/100-c.Done); err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
				})
			}
			env, l := newEachEnv(t)
			for _, pct := range []int{30, 60, 90} {
				exit := idemtest.Fork(t, env.arg(strconv.Itoa(pct)), nil)
				if !exit.Killed {
					t.Fatalf("run to %d%% was not killed: %+v", pct, exit)
				}
				c, err := l.CountItems(context.Background(), points)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("killed at %d%%: %+v", pct, c)
				time.Sleep(600 * time.Millisecond) // the dead process's 500 ms leases expire
			}
			if err := eachChild(env, mode, -1); err != nil {
				t.Fatal(err)
			}
			checkApplied(t, l, env, mode)
		})
	}
}

// TestEachFourProcesses shares 10k items between 4 processes at once.
func TestEachFourProcesses(t *testing.T) {
	testDSN(t)
	if testing.Short() {
		t.Skip("4 processes, 10k items")
	}
	for _, mode := range []string{"tx", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			if idemtest.IsChild(t) {
				idemtest.Start(t, "", func(arg string) { // does not return
					env, _ := parseEnv(arg)
					if err := eachChild(env, mode, -1); err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
				})
			}
			env, l := newEachEnv(t)
			var children []*idemtest.Child
			for range 4 {
				children = append(children, idemtest.Start(t, env.arg(""), nil))
			}
			for i, c := range children {
				if e := c.Wait(); e.Killed || e.Code != 0 {
					t.Errorf("process %d: %+v", i, e)
				}
			}
			if !t.Failed() {
				checkApplied(t, l, env, mode)
			}
		})
	}
}
