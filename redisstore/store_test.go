package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// TestFencing: Renew and Finish of an attempt that no longer holds the key
// fail with ErrLeaseLost and change nothing; the attempt numbers (the
// fencing tokens) of successive claims increase.
func TestFencing(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	s := openStore(t, c)
	ctx := context.Background()
	k := idem.Key{Job: "fence", Period: "2026-10-27"}
	req := idemstore.ClaimRequest{Key: k, Owner: "a", Now: time.Now(), Lease: time.Minute}
	a, err := s.Claim(ctx, req)
	if err != nil || a.State != idemstore.ClaimAcquired || a.Attempt != 1 {
		t.Fatalf("first claim: %+v, %v", a, err)
	}
	if err := shiftTimes(s, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	req.Owner = "b"
	b, err := s.Claim(ctx, req)
	if err != nil || b.State != idemstore.ClaimAcquired || b.Attempt != 2 || !b.Doubt {
		t.Fatalf("claim after the lease expired: %+v, %v; want attempt 2 in doubt", b, err)
	}
	before, _, err := s.Lookup(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, k, a.Attempt, time.Now(), time.Hour); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew of attempt 1: %v, want ErrLeaseLost", err)
	}
	if err := s.Finish(ctx, k, a.Attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now()}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Finish of attempt 1: %v, want ErrLeaseLost", err)
	}
	after, _, err := s.Lookup(ctx, k)
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("record after the fenced calls: %+v, %v; want it unchanged: %+v", after, err, before)
	}
	if err := s.Finish(ctx, k, b.Attempt, idemstore.End{Status: idemstore.StatusDone, Now: time.Now()}); err != nil {
		t.Fatalf("Finish of attempt 2: %v", err)
	}
	// A done mark has no TTL: it stays until pruned.
	if ttl, err := c.TTL(ctx, "{"+s.Prefix()+"}:run:5:fence:2026-10-27").Result(); err != nil || ttl != -1 {
		t.Fatalf("TTL of the done record: %v, %v; want none (-1)", ttl, err)
	}
}

// TestLeaseOnServerClock: a claimer whose clock is hours ahead does not
// take a live lease, and one whose clock is hours behind takes an expired
// one: the server's TIME decides. The deadlines a claim reports are on the
// claimer's clock.
func TestLeaseOnServerClock(t *testing.T) {
	t.Parallel()
	s := openStore(t, newClient(t))
	ctx := context.Background()
	k := idem.Key{Job: "skew", Period: "2026-10-27"}
	if c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "a", Now: time.Now(), Lease: time.Hour}); err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("first claim: %+v, %v", c, err)
	}
	ahead := time.Now().Add(5 * time.Hour)
	c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Now: ahead, Lease: time.Hour})
	if err != nil || c.State != idemstore.ClaimBusy {
		t.Fatalf("claim with a clock 5 hours ahead: %+v, %v; want ClaimBusy", c, err)
	}
	if left := c.Record.LeaseUntil.Sub(ahead); left <= 0 || left > time.Hour {
		t.Fatalf("reported lease end %v is %v after the claimer's now; want within the hour's lease", c.Record.LeaseUntil, left)
	}
	if err := shiftTimes(s, time.Hour+time.Second); err != nil {
		t.Fatal(err)
	}
	behind := time.Now().Add(-5 * time.Hour)
	c, err = s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Now: behind, Lease: time.Hour})
	if err != nil || c.State != idemstore.ClaimAcquired || c.Attempt != 2 {
		t.Fatalf("claim with a clock 5 hours behind, lease expired on the server: %+v, %v; want attempt 2", c, err)
	}
}

// TestAbandonedNote: the note a take-over writes (formatted by the claim
// script, lease end in UTC with microseconds) is idemstore.AbandonedNote's,
// for lease ends on many dates.
func TestAbandonedNote(t *testing.T) {
	t.Parallel()
	s := openStore(t, newClient(t))
	ctx := context.Background()
	for i, back := range []time.Duration{time.Second, 37 * time.Hour, 400 * 24 * time.Hour, 3 * 365 * 24 * time.Hour,
		30*365*24*time.Hour + 123456*time.Microsecond, 50 * 365 * 24 * time.Hour} {
		k := idem.Key{Job: "note", Period: fmt.Sprintf("p%d", i)}
		if c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "host:1:abcd", Now: time.Now(), Lease: time.Millisecond}); err != nil || c.State != idemstore.ClaimAcquired {
			t.Fatalf("claim: %+v, %v", c, err)
		}
		if err := shiftTimes(s, back); err != nil {
			t.Fatal(err)
		}
		was, _, err := s.Lookup(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Now: time.Now(), Lease: time.Minute})
		if err != nil || c.State != idemstore.ClaimAcquired {
			t.Fatalf("take-over: %+v, %v", c, err)
		}
		rec, _, err := s.Lookup(ctx, k)
		want := idemstore.AbandonedNote(was, was.LeaseUntil.Add(time.Second))
		if err != nil || rec.LastError != want || rec.Failures != 1 {
			t.Fatalf("lease end %s: note %q, failures %d (%v); want %q, 1", was.LeaseUntil.UTC(), rec.LastError, rec.Failures, err, want)
		}
	}
}
