//go:build !race

package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
)

const (
	randomKillItems  = 3000
	randomKillPoison = "acct-001234"
)

// randomKillChild runs Each over randomKillItems items in mode, each item
// taking about 200 µs. With dieWhileRecording it SIGKILLs itself in the
// middle of generating the item set (after 1700 items: some chunks are
// recorded, the set is not sealed).
func randomKillChild(dir, mode string, dieWhileRecording bool) error {
	l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return err
	}
	defer l.Close()
	ctx := context.Background()
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
	work := func() { time.Sleep(time.Duration(100+rand.IntN(200)) * time.Microsecond) }
	if mode == "tx" {
		_, err = idem.EachTx(ctx, l, points, items, func(ctx context.Context, tx *sql.Tx, item string) error {
			work()
			if item == randomKillPoison {
				return errors.New("account frozen")
			}
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
	var m idem.Option
	switch mode {
	case "two-phase":
		m = idem.TwoPhase(func(ctx context.Context, _ idem.Key) (bool, error) {
			info, _ := idem.InfoFrom(ctx)
			return newEffects(dir).Counts(nil)[info.Item] > 0, nil
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
		_, err := log.WriteString(item + "\n") // a SIGKILL loses nothing written
		return err
	}, fanOut, opts[0], opts[1], m)
	return err
}

// TestEachRandomKills SIGKILLs Each from outside at random moments: first
// while it generates the item set, then 12 times after a random delay
// (landing in start-up, the wait for a dead process's leases, claims,
// windows, done marks), then lets a last run finish. Every mode keeps its
// promise for all 3000 items: exactly once (tx, two-phase), at least once,
// at most once with every missing effect accounted for as unknown.
func TestEachRandomKills(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("3000 items, 13 kills per mode")
	}
	for _, mode := range []string{"tx", "two-phase", "at-most-once", "at-least-once"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			dir := t.TempDir()
			prepareGranted(t, dir)
			child := func(arg string) {
				d, recording, _ := strings.Cut(arg, "|")
				err := randomKillChild(d, mode, recording == "record")
				if err != nil && !(mode == "at-most-once" && errors.Is(err, idem.ErrUnknownOutcome)) {
					fmt.Println(err)
					os.Exit(3)
				}
			}
			if exit := idemtest.Fork(t, dir+"|record", child); !exit.Killed {
				t.Fatalf("the run that dies while recording: %+v", exit)
			}
			if c, err := openLedger(t, dir).CountItems(context.Background(), points); err != nil || c.Sealed || c.Total() == 0 || c.Total() >= randomKillItems {
				t.Fatalf("after the kill while recording: %+v, %v; want part of the set, unsealed", c, err)
			}
			midway := 0 // kills that left the period open
			for range 12 {
				c := idemtest.Start(t, dir+"|run", child)
				time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
				c.Kill()
				if e := c.Wait(); !e.Killed && e.Code != 0 {
					t.Fatalf("run: %+v", e)
				}
				l, err := idem.OpenLedger(filepath.Join(dir, "ledger.db"))
				if err != nil {
					t.Fatal(err)
				}
				if rec, ok, err := l.Lookup(context.Background(), points); err == nil && (!ok || rec.Status != idem.StatusDone) {
					midway++
				}
				l.Close()
			}
			t.Logf("%d of 12 kills left the period open", midway)
			err := randomKillChild(dir, mode, false)
			if err != nil && !(mode == "at-most-once" && errors.Is(err, idem.ErrUnknownOutcome)) {
				t.Fatalf("last run: %v", err)
			}
			checkRandomKills(t, dir, mode)
		})
	}
}

func checkRandomKills(t *testing.T, dir, mode string) {
	t.Helper()
	got := appliedCounts(t, dir, mode)
	c, err := openLedger(t, dir).CountItems(context.Background(), points)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counts %+v; %d items have an effect", c, len(got))
	if c.Total() != randomKillItems || !c.Sealed || c.Pending+c.Running+c.Failed != 0 {
		t.Fatalf("counts %+v: want %d items, sealed, every one settled", c, randomKillItems)
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
	if mode == "at-most-once" {
		// Done items took effect; the rest without one are unknown (or the
		// poison item, parked or unknown).
		if int64(applied) < c.Done || int64(applied) > c.Done+c.Unknown {
			t.Fatalf("%d items applied, %d done, %d unknown", applied, c.Done, c.Unknown)
		}
		return
	}
	if c.Done != randomKillItems-1 || c.Parked != 1 || c.Unknown != 0 {
		t.Fatalf("counts %+v: want every item done but the poison one, parked", c)
	}
}
