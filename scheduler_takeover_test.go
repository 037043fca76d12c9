package idem_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/holder"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/internal/testwait"
)

// holdPeriod claims key for owner at now with lease, as another replica's
// run would: its record is running, held until now+lease.
func holdPeriod(t *testing.T, l *idem.Ledger, key idem.Key, owner string, now time.Time, lease time.Duration) {
	t.Helper()
	c, err := testledger.SPI(t, l).Claim(context.Background(), idemstore.ClaimRequest{Key: key, Owner: owner, Now: now, Lease: lease})
	if err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("claim %s for %s: %+v, %v", key, owner, c, err)
	}
}

// TestSchedulerLooksAgainAtHolderLeaseEnd: a replica that finds its
// period held by another (a process of another host: nothing proves it
// dead) looks again when the holder's lease ends, as the store reports
// it, not a whole lease of its own after its look; and takes the period
// over then.
func TestSchedulerLooksAgainAtHolderLeaseEnd(t *testing.T) {
	l := openLedger(t, t.TempDir())
	clk := schedtest.NewClock(schedtest.UTC(t, "2026-03-01T10:30:00Z"))
	key := idem.Key{Job: "hourly", Period: "2026-03-01T09:00Z"}
	// Replica A, on another host, claimed 09:00 twenty seconds ago with a
	// lease of 45 s: its lease ends at 10:30:25.
	leaseEnd := clk.Now().Add(25 * time.Second)
	holdPeriod(t, l, key, "elsewhere:4242:0badcafe", clk.Now().Add(-20*time.Second), 45*time.Second)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	st := s.Status().Jobs[0]
	if st.LastOutcome != idem.InProgress || !st.NextRun.Equal(leaseEnd) {
		t.Fatalf("after finding 09:00 held: outcome %v, NextRun %v; want in_progress, the holder's lease end %v (status %+v)",
			st.LastOutcome, st.NextRun, leaseEnd, st)
	}
	wantPeriods(t, "while A's lease lasts", c.get())
	clk.Advance(25 * time.Second)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "at A's lease end", c.get(), "2026-03-01T09:00Z")
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Errorf("09:00 after the takeover: %s attempt %d, want done by attempt 2", rec.Status, rec.Attempt)
	}
}

// TestSchedulerTakesOverKilledHolder: replica A, a process of this host,
// holds a period with a long lease; replica B, running, finds it held. A
// is SIGKILLed. B takes the period over at its next check of the holder
// (within a second of its clock), not when A's lease ends.
func TestSchedulerTakesOverKilledHolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	start := schedtest.UTC(t, "2026-03-01T10:30:00Z")
	key := idem.Key{Job: "hourly", Period: "2026-03-01T09:00Z"}
	if !idemtest.IsChild(t) {
		openLedger(t, dir)
	}
	child := idemtest.Start(t, path, func(path string) {
		// Replica A: claim 09:00 for ten minutes, say so, and hang.
		l, err := idem.OpenLedger(path)
		var c idemstore.Claim
		var st idemstore.Store
		if err == nil {
			st, err = idemstore.Of(l)
		}
		if err == nil {
			c, err = st.Claim(context.Background(), idemstore.ClaimRequest{Key: key, Owner: idemstore.Owner(), Now: start, Lease: 10 * time.Minute})
		}
		if err == nil && c.State != idemstore.ClaimAcquired {
			err = fmt.Errorf("claim: %+v", c)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "replica A:", err)
			os.Exit(1)
		}
		time.Sleep(time.Hour) // until killed
	})
	l := openLedger(t, dir)
	var rec idem.Record
	testwait.Until(t, func() bool {
		r, ok, err := l.Lookup(context.Background(), key)
		rec = r
		return err == nil && ok && r.Status == idem.StatusRunning
	}, "replica A to claim %s", key)
	if !holder.Local(rec.Owner) {
		t.Skipf("this system cannot prove a process of this host dead (owner %q)", rec.Owner)
	}

	clk := schedtest.NewClock(start)
	s := idem.NewScheduler(l, idem.WithClock(clk))
	var c calls
	if err := s.Add("hourly", idem.Hourly(time.UTC), c.fn); err != nil {
		t.Fatal(err)
	}
	startScheduler(t, s)
	schedtest.Idle(t, s, clk.Now())
	st := s.Status().Jobs[0]
	if st.LastOutcome != idem.InProgress || st.NextRun.After(clk.Now().Add(time.Second)) {
		t.Fatalf("B after finding 09:00 held by a live A: outcome %v, NextRun %v; want in_progress, within a second",
			st.LastOutcome, st.NextRun)
	}
	clk.Advance(time.Second) // A lives: B checks it, and leaves the period alone
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "while A lives", c.get())

	child.Kill()
	if x := child.Wait(); !x.Killed {
		t.Fatalf("replica A ended, not killed: code %d\n%s", x.Code, x.Output)
	}
	clk.Advance(time.Second)
	schedtest.Idle(t, s, clk.Now())
	wantPeriods(t, "a second after A was killed", c.get(), "2026-03-01T09:00Z")
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusDone || rec.Attempt != 2 {
		t.Errorf("09:00 after the takeover: %s attempt %d, want done by attempt 2", rec.Status, rec.Attempt)
	}
	if lease := start.Add(10 * time.Minute); !clk.Now().Before(lease) {
		t.Fatalf("the clock reached A's lease end %v", lease)
	}
}
