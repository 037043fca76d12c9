package idemtest

// TestEachRandomKills, the random-kill kit of the fan-out: Each and EachTx
// in a child process, SIGKILLed while recording the item set and then at
// random moments, and the effects log its non-transactional modes write.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/effectlog"
)

const (
	randomKillItems  = 3000
	randomKillPoison = "acct-001234" // fails on every attempt
)

// randomKillKey is the period whose items TestEachRandomKills fans out.
var randomKillKey = idem.Key{Job: "daily_points", Period: "2026-10-27"}

// TestEachRandomKills SIGKILLs Each (EachTx in mode tx) from outside at
// random moments, in a child process, in each mode (subtests tx,
// two-phase, at-most-once, at-least-once): first while it generates the
// item set (after 1700 of 3000 items: some chunks recorded, the set not
// sealed), then 12 times after a random delay (landing in start-up, the
// wait for a dead process's leases, chunk claims, windows, done marks),
// then lets a last run finish in the test's process. One item fails on
// every attempt. Every mode keeps its promise for all 3000 items: exactly
// once (tx: h.Apply's writes, counted by h.Applied; two-phase: records of an
// effects log that its check reads), at least once, at most once with
// every missing effect accounted for as unknown; every item is settled,
// the failing one parked (at most once: parked or unknown) and without an
// effect, and (but at most once) the period is done.
//
// Each run has 2 workers, a lease of 300 ms and up to 3 attempts an item;
// an item's work, 100-300 µs, is half before its effect and half after it.
// The seed of the kills' delays is logged.
//
// The store behind h.Open's ([idemstore.Of]) must be an
// idemstore.ItemTxStore of Tx.
func TestEachRandomKills[Tx any](t *testing.T, h KillHarness[Tx]) {
	for _, mode := range []string{"tx", "two-phase", "at-most-once", "at-least-once"} {
		t.Run(mode, func(t *testing.T) {
			if IsChild(t) {
				Start(t, "", func(arg string) { // does not return
					f := strings.SplitN(arg, "|", 3)
					if err := randomKillRun(h, f[2], f[1], mode, f[0] == "record"); !randomKillOK(mode, err) {
						fmt.Println(err)
						os.Exit(3)
					}
				})
			}
			if h.Parallel {
				t.Parallel()
			}
			testRandomKills(t, h, mode)
		})
	}
}

func testRandomKills[Tx any](t *testing.T, h KillHarness[Tx], mode string) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ctx := context.Background()
	s, storeArg := h.Open(t)
	st, err := idemstore.Of(s)
	if err != nil {
		t.Fatalf("idemtest: TestEachRandomKills: %v", err)
	}
	is, ok := st.(idemstore.ItemStore)
	if !ok {
		t.Fatalf("idemtest: TestEachRandomKills: the store %T is no idemstore.ItemStore", st)
	}
	notDone := func() string {
		if h.NotDone == nil {
			return "(no KillHarness.NotDone)"
		}
		return h.NotDone(t, s, randomKillKey)
	}
	dir := t.TempDir() // the effects log
	arg := func(what string) string { return what + "|" + dir + "|" + storeArg }

	if exit := Fork(t, arg("record"), nil); !exit.Killed {
		t.Fatalf("the run that dies while recording: %+v", exit)
	}
	if c, err := is.CountItems(ctx, randomKillKey); err != nil || c.Sealed || c.Total() >= randomKillItems ||
		c.Total() == 0 && !h.SetUntilSeal || c.Total() != 0 && h.SetUntilSeal {
		want := "part of the set, unsealed"
		if h.SetUntilSeal {
			want = "no item (KillHarness.SetUntilSeal)"
		}
		t.Fatalf("after the kill while recording: %+v, %v; want %s", c, err, want)
	}
	midway := 0 // kills that left the period open
	for range 12 {
		c := Start(t, arg("run"), nil)
		time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
		c.Kill()
		if e := c.Wait(); !e.Killed && e.Code != 0 {
			t.Fatalf("run: %+v", e)
		}
		if rec, ok, err := s.Lookup(ctx, randomKillKey); err != nil {
			t.Fatal(err)
		} else if !ok || rec.Status != idem.StatusDone {
			midway++
		}
	}
	t.Logf("%d of 12 kills left the period open", midway)
	if err := randomKillRun(h, storeArg, dir, mode, false); !randomKillOK(mode, err) {
		t.Fatalf("last run: %v; items not done: %s", err, notDone())
	}

	var got map[string]int
	if mode == "tx" {
		got = h.Applied(t, s)
	} else if got, err = effectlog.Counts(filepath.Join(dir, "effects.log")); err != nil {
		t.Fatal(err)
	}
	c, err := is.CountItems(ctx, randomKillKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counts %+v; %d items have an effect", c, len(got))
	if c.Total() != randomKillItems || !c.Sealed || c.Pending+c.Running+c.Failed != 0 {
		t.Fatalf("counts %+v: want %d items, sealed, every one settled; items not done: %s", c, randomKillItems, notDone())
	}
	if got[randomKillPoison] != 0 {
		t.Fatalf("the poison item has an effect")
	}
	strange := strangeRecords(got)
	applied := 0
	for i := range randomKillItems {
		it := fmt.Sprintf("acct-%06d", i)
		n := got[it]
		if n > 0 {
			applied++
		}
		switch {
		case it == randomKillPoison:
		case mode == "at-least-once" && n < 1, mode == "tx" && n != 1, mode == "two-phase" && n != 1,
			mode == "at-most-once" && n > 1:
			t.Fatalf("%s: %s applied %d times; its record: %s; records that name no item: %v; %s", mode, it, n,
				randomKillItemStatus(ctx, h, s, it), strange, keepEffectsLog(dir, mode, seed))
		}
	}
	if len(strange) > 0 {
		t.Fatalf("records in the effects log that name no item: %v; %s", strange, keepEffectsLog(dir, mode, seed))
	}
	poisonStatus := "(no KillHarness.ItemStatus)"
	if h.ItemStatus != nil {
		if poisonStatus, err = h.ItemStatus(ctx, s, randomKillKey, randomKillPoison); err != nil {
			t.Fatalf("the poison item's record: %v", err)
		}
	}
	if mode == "at-most-once" {
		// Done items took effect; the rest without one are unknown (or the
		// poison item, parked or unknown).
		if int64(applied) < c.Done || int64(applied) > c.Done+c.Unknown {
			t.Fatalf("%d items applied, %d done, %d unknown", applied, c.Done, c.Unknown)
		}
		if h.ItemStatus != nil && poisonStatus != "parked" && poisonStatus != "unknown" {
			t.Fatalf("the poison item is %s, want parked or unknown", poisonStatus)
		}
		return
	}
	if c.Done != randomKillItems-1 || c.Parked != 1 || c.Unknown != 0 || (h.ItemStatus != nil && poisonStatus != "parked") {
		t.Fatalf("counts %+v, the poison item %s: want every item done but the poison one, parked", c, poisonStatus)
	}
	if rec, ok, err := s.Lookup(ctx, randomKillKey); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("period %+v, %v, %v", rec, ok, err)
	}
}

// strangeRecords returns the counts of got's records that name no item of
// the set: none, unless the effects log is mangled.
func strangeRecords(got map[string]int) map[string]int {
	strange := map[string]int{}
	for it, n := range got {
		strange[it] = n
	}
	for i := range randomKillItems {
		delete(strange, fmt.Sprintf("acct-%06d", i))
	}
	return strange
}

// randomKillItemStatus is what the store recorded for item, for a
// failure's message: h.ItemDetail's description, else h.ItemStatus's.
func randomKillItemStatus[Tx any](ctx context.Context, h KillHarness[Tx], s idem.TxStore[Tx], item string) string {
	switch {
	case h.ItemDetail != nil:
		return h.ItemDetail(ctx, s, randomKillKey, item)
	case h.ItemStatus == nil:
		return "(no KillHarness.ItemStatus)"
	}
	st, err := h.ItemStatus(ctx, s, randomKillKey, item)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return st
}

// keepEffectsLog copies the effects log in dir (the test's temporary
// directory, removed when it ends) to the system's temporary directory,
// for a failure's message: where to read it.
func keepEffectsLog(dir, mode string, seed int64) string {
	if mode == "tx" {
		return "its effects are the store's (KillHarness.Applied)"
	}
	b, err := os.ReadFile(filepath.Join(dir, "effects.log"))
	if err != nil {
		return "the effects log: " + err.Error()
	}
	f, err := os.CreateTemp("", fmt.Sprintf("idem-effects-%s-%d-*.log", mode, seed))
	if err == nil {
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return "keeping the effects log: " + err.Error()
	}
	return "the effects log kept at " + f.Name()
}

// randomKillOK reports whether a run of randomKillRun ended as mode
// allows: without an error, or (at most once) with items whose outcome is
// unknown.
func randomKillOK(mode string, err error) bool {
	return err == nil || mode == "at-most-once" && errors.Is(err, idem.ErrUnknownOutcome)
}

// randomKillRun runs Each (EachTx for tx) over randomKillItems items in
// mode on the store h.Reopen opens from storeArg, the effects log in dir.
// With dieWhileRecording it SIGKILLs this process in the middle of
// generating the item set (after 1700 items: some chunks are recorded, the
// set is not sealed).
func randomKillRun[Tx any](h KillHarness[Tx], storeArg, dir, mode string, dieWhileRecording bool) error {
	ctx := context.Background()
	s, done, err := h.Reopen(ctx, storeArg)
	if err != nil {
		return err
	}
	defer done()
	items := func(yield func(string, error) bool) {
		for i := range randomKillItems {
			if dieWhileRecording && i == 1700 {
				Kill()
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
	// leave an applied item in doubt on a store that commits a done mark
	// sent before the kill (PostgreSQL): the only gap is between the effect
	// and the send.
	work := func() { time.Sleep(time.Duration(50+rand.IntN(100)) * time.Microsecond) }
	if mode == "tx" {
		_, err = idem.EachTx(ctx, s, randomKillKey, items, func(ctx context.Context, tx Tx, item string) error {
			work()
			if item == randomKillPoison {
				return errors.New("account frozen")
			}
			if err := h.Apply(ctx, s, tx, item); err != nil {
				return err
			}
			work()
			return nil
		}, fanOut, opts[0], opts[1])
		return err
	}
	path := filepath.Join(dir, "effects.log")
	log, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	var m idem.Option
	switch mode {
	case "two-phase":
		seen := effectlog.NewReader(path)
		m = idem.TwoPhase(func(ctx context.Context, _ idem.Key) (bool, error) {
			info, _ := idem.InfoFrom(ctx)
			n, err := seen.Count(info.Item)
			return n > 0, err
		})
	case "at-most-once":
		m = idem.AtMostOnce()
	case "at-least-once":
		m = idem.AtLeastOnce()
	}
	_, err = idem.Each(ctx, s, randomKillKey, items, func(ctx context.Context, item string) error {
		work()
		if item == randomKillPoison {
			return idem.NothingHappened(errors.New("account frozen"))
		}
		if err := idem.CheckLease(ctx); err != nil { // the last check before the effect
			return err
		}
		// One record, one write (O_APPEND): a SIGKILL loses nothing
		// written, and a write it cuts short is no record (effectlog).
		if err := effectlog.Append(log, item); err != nil {
			return err
		}
		work()
		return nil
	}, fanOut, opts[0], opts[1], m)
	return err
}
