package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
)

// TestHolderGoneTakenOverAtOnce: an attempt whose lease holds on the
// server's clock, but whose owner is a process of this host that has
// ended (idemstore.HolderGone), is taken over at once, in doubt, counted as
// a failure, with the note that its process died.
func TestHolderGoneTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	owner := holder.EndedForTest()
	if owner == "" {
		t.Skip("HolderGone cannot prove a process dead here (an owner without scope)")
	}
	s := openStore(t, newClient(t))
	ctx := context.Background()
	k := idem.Key{Job: "gone", Period: "2026-10-27"}
	if c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: owner, Now: time.Now(), Lease: time.Hour}); err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("first claim: %+v, %v", c, err)
	}
	held, _, err := s.Lookup(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Now: time.Now(), Lease: time.Minute})
	if err != nil || c.State != idemstore.ClaimAcquired || c.Attempt != 2 || !c.Doubt {
		t.Fatalf("claim over a dead holder's live lease: %+v, %v; want attempt 2 in doubt", c, err)
	}
	want := idemstore.AbandonedNote(held, held.LeaseUntil.Add(-time.Minute)) // its lease still held: NoteDied
	if c.Record.LastError != want || c.Record.Failures != 1 {
		t.Fatalf("note %q, failures %d; want %q, 1", c.Record.LastError, c.Record.Failures, want)
	}
}
