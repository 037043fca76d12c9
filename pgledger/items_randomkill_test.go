package pgledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// The Postgres twin of the root package's TestEachRandomKills: Each and
// EachTx SIGKILLed while generating the item set, then at random moments,
// in every mode.

const (
	randomKillItems  = 3000
	randomKillPoison = "acct-001234" // fails on every attempt
)

// randomKillChild runs Each (EachTx for tx) over randomKillItems items in
// mode, each item taking about 200 µs, on the test's ledger through a pool
// of its own. With dieWhileRecording it SIGKILLs itself in the middle of
// generating the item set (after 1700 items: some chunks are recorded, the
// set is not sealed).
func randomKillChild(env eachEnv, mode string, dieWhileRecording bool) error {
	ctx := context.Background()
	l, err := openChildLedger(ctx, env)
	if err != nil {
		return err
	}
	defer l.Pool().Close()
	items := func(yield func(string, error) bool) {
		for i := range randomKillItems {
			if dieWhileRecording && i == 1700 {
				idemtest.Kill()
			}
			if !yield(fmt.Sprintf("acct-%06d", i), nil) {
				return
			}
		}
	}
	fanOut := idem.WithWorkers(2)
	opts := []idem.Option{idem.WithLease(300 * time.Millisecond),
		idem.WithBackoff(idem.MaxAttempts(3, idem.Constant(time.Millisecond)))}
	// An item's work, 100-300 µs in all, is half before its effect and half
	// after it (waiting for the effect's acknowledgement, say), so that kills
	// land after an effect, before its done mark is sent, about as often as
	// before it. With all the work before the effect, hardly any kill would
	// leave an applied item in doubt: PostgreSQL commits a done mark sent
	// before the kill, so the only gap is between the effect and the send
	// (dropping the chunk's doubt then failed at most once in 3 runs of 8).
	work := func() { time.Sleep(time.Duration(50+rand.IntN(100)) * time.Microsecond) }
	if mode == "tx" {
		granted := table(l, "granted")
		_, err = idem.EachTx(ctx, l, points, items, func(ctx context.Context, tx pgx.Tx, item string) error {
			work()
			if item == randomKillPoison {
				return errors.New("account frozen")
			}
			if err := grant(ctx, tx, granted, item); err != nil {
				return err
			}
			work()
			return nil
		}, fanOut, opts[0], opts[1])
		return err
	}
	path := filepath.Join(env.dir, "effects.log")
	log, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	var m idem.Option
	switch mode {
	case "two-phase":
		seen := &effectsReader{path: path, n: map[string]int{}}
		m = idem.TwoPhase(func(ctx context.Context, _ idem.Key) (bool, error) {
			info, _ := idem.InfoFrom(ctx)
			n, err := seen.count(info.Item)
			return n > 0, err
		})
	case "at-most-once":
		m = idem.AtMostOnce()
	case "at-least-once":
		m = idem.AtLeastOnce()
	}
	_, err = idem.Each(ctx, l, points, items, func(ctx context.Context, item string) error {
		work()
		if item == randomKillPoison {
			return idem.NothingHappened(errors.New("account frozen"))
		}
		if err := idem.CheckLease(ctx); err != nil { // the last check before the effect
			return err
		}
		if _, err := log.WriteString(item + "\n"); err != nil { // a SIGKILL loses nothing written
			return err
		}
		work()
		return nil
	}, fanOut, opts[0], opts[1], m)
	return err
}

// randomKillOK reports whether a run of randomKillChild ended as mode
// allows: without an error, or (at most once) with items whose outcome is
// unknown.
func randomKillOK(mode string, err error) bool {
	return err == nil || mode == "at-most-once" && errors.Is(err, idem.ErrUnknownOutcome)
}

// TestEachRandomKills SIGKILLs Each from outside at random moments: first
// while it generates the item set, then 12 times after a random delay
// (landing in start-up, the wait for a dead process's leases, chunk claims,
// windows, done marks), then lets a last run finish. Every mode keeps its
// promise for all 3000 items: exactly once (tx, two-phase), at least once,
// at most once with every missing effect accounted for as unknown.
func TestEachRandomKills(t *testing.T) {
	testDSN(t)
	if testing.Short() {
		t.Skip("3000 items, 13 kills per mode")
	}
	for _, mode := range []string{"tx", "two-phase", "at-most-once", "at-least-once"} {
		t.Run(mode, func(t *testing.T) {
			if idemtest.IsChild(t) {
				idemtest.Start(t, "", func(arg string) { // does not return
					env, what := parseEnv(arg)
					if err := randomKillChild(env, mode, what == "record"); !randomKillOK(mode, err) {
						fmt.Println(err)
						os.Exit(3)
					}
				})
			}
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			env, l := newEachEnv(t)
			ctx := context.Background()
			if exit := idemtest.Fork(t, env.arg("record"), nil); !exit.Killed {
				t.Fatalf("the run that dies while recording: %+v", exit)
			}
			if c, err := l.CountItems(ctx, points); err != nil || c.Sealed || c.Total() == 0 || c.Total() >= randomKillItems {
				t.Fatalf("after the kill while recording: %+v, %v; want part of the set, unsealed", c, err)
			}
			midway := 0 // kills that left the period open
			for range 12 {
				c := idemtest.Start(t, env.arg("run"), nil)
				time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
				c.Kill()
				if e := c.Wait(); !e.Killed && e.Code != 0 {
					t.Fatalf("run: %+v", e)
				}
				if rec, ok, err := l.Lookup(ctx, points); err != nil {
					t.Fatal(err)
				} else if !ok || rec.Status != idem.StatusDone {
					midway++
				}
			}
			t.Logf("%d of 12 kills left the period open", midway)
			if err := randomKillChild(env, mode, false); !randomKillOK(mode, err) {
				t.Fatalf("last run: %v; items not done: %s", err, notDone(t, l))
			}
			checkRandomKills(t, l, env, mode)
		})
	}
}

func checkRandomKills(t *testing.T, l *pgledger.Ledger, env eachEnv, mode string) {
	t.Helper()
	ctx := context.Background()
	var got map[string]int
	if mode == "tx" {
		got = grantedCounts(t, l, table(l, "granted"))
	} else {
		var err error
		if got, err = readEffects(env.dir); err != nil {
			t.Fatal(err)
		}
	}
	c, err := l.CountItems(ctx, points)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counts %+v; %d items have an effect", c, len(got))
	if c.Total() != randomKillItems || !c.Sealed || c.Pending+c.Running+c.Failed != 0 {
		t.Fatalf("counts %+v: want %d items, sealed, every one settled; items not done: %s", c, randomKillItems, notDone(t, l))
	}
	if got[randomKillPoison] != 0 {
		t.Fatalf("the poison item has an effect")
	}
	applied := 0
	for i := range randomKillItems {
		it := fmt.Sprintf("acct-%06d", i)
		n := got[it]
		if n > 0 {
			applied++
		}
		switch {
		case it == randomKillPoison:
		case mode == "at-least-once" && n < 1, mode == "tx" && n != 1, mode == "two-phase" && n != 1:
			t.Fatalf("%s: %s applied %d times", mode, it, n)
		case mode == "at-most-once" && n > 1:
			t.Fatalf("%s: %s applied %d times", mode, it, n)
		}
	}
	if len(got) != applied {
		t.Fatalf("effects for items that are not in the set: %d, %d", len(got), applied)
	}
	var poisonStatus string
	if err := l.Pool().QueryRow(ctx, `SELECT status FROM `+table(l, "item_state")+` WHERE item = $1`, randomKillPoison).Scan(&poisonStatus); err != nil {
		t.Fatalf("the poison item's record: %v", err)
	}
	if mode == "at-most-once" {
		// Done items took effect; the rest without one are unknown (or the
		// poison item, parked or unknown).
		if int64(applied) < c.Done || int64(applied) > c.Done+c.Unknown {
			t.Fatalf("%d items applied, %d done, %d unknown", applied, c.Done, c.Unknown)
		}
		if poisonStatus != "parked" && poisonStatus != "unknown" {
			t.Fatalf("the poison item is %s, want parked or unknown", poisonStatus)
		}
		return
	}
	if c.Done != randomKillItems-1 || c.Parked != 1 || c.Unknown != 0 || poisonStatus != "parked" {
		t.Fatalf("counts %+v, the poison item %s: want every item done but the poison one, parked", c, poisonStatus)
	}
	if rec, ok, err := l.Lookup(ctx, points); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("period %+v, %v, %v", rec, ok, err)
	}
}
