package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
)

// TestAbandonedNotesShared: when a claim takes over an attempt that ended
// without a done mark, the Postgres ledger (a key's claim and a single
// item's, both written in SQL on the server's clock) records the note of
// idemstore.AbandonedNote, to the letter, as idem's SQLite ledger and state
// file do.
func TestAbandonedNotesShared(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		owner string
		lease time.Duration // the abandoned attempt's lease end, from the server's now
	}{
		{"lease expired", "a", -time.Second},
		{"process died", holder.EndedForTest(), time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.owner == "" {
				t.Skip("HolderGone cannot prove a process dead here (an owner without scope)")
			}
			l := openLedger(t, pool)

			// A key's claim.
			k := idem.Key{Job: "notes", Period: "2026-10-27"}
			if cl, err := l.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: c.owner, Lease: time.Minute}); err != nil || cl.State != idemstore.ClaimAcquired {
				t.Fatalf("first claim %+v, %v", cl, err)
			}
			shift(t, l, time.Minute-c.lease) // the lease now ends c.lease from now
			held, ok, err := l.Lookup(ctx, k)
			if err != nil || !ok {
				t.Fatalf("lookup: %+v, %v, %v", held, ok, err)
			}
			cl, err := l.Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Lease: time.Minute})
			if err != nil || cl.State != idemstore.ClaimAcquired || !cl.Doubt {
				t.Fatalf("takeover %+v, %v", cl, err)
			}
			want := idemstore.AbandonedNote(held, held.LeaseUntil.Add(-c.lease))
			if cl.Record.LastError != want {
				t.Fatalf("key's note %q, want %q", cl.Record.LastError, want)
			}

			// A single item's claim.
			var until time.Time
			if err := l.Pool().QueryRow(ctx, `INSERT INTO `+table(l, "item_state")+`(job, period, item, status, attempt, owner, lease_until, updated)
				VALUES($1, $2, 'x', 'running', 2, $3, clock_timestamp() + $4::float8 * interval '1 microsecond', clock_timestamp())
				RETURNING lease_until`, k.Job, k.Period, c.owner, float64(c.lease/time.Microsecond)).Scan(&until); err != nil {
				t.Fatal(err)
			}
			b, err := l.ClaimItems(ctx, k, idemstore.ItemClaimRequest{N: 10, Owner: "d", Lease: time.Minute})
			if err != nil || len(b.Items) != 1 || !b.Items[0].Doubt {
				t.Fatalf("item takeover %+v, %v", b, err)
			}
			var note string
			if err := l.Pool().QueryRow(ctx, `SELECT last_error FROM `+table(l, "item_state")+` WHERE item = 'x'`).Scan(&note); err != nil {
				t.Fatal(err)
			}
			want = idemstore.AbandonedNote(idemstore.Record{Attempt: 2, Owner: c.owner, LeaseUntil: until}, until.Add(-c.lease))
			if note != want {
				t.Fatalf("item's note %q, want %q", note, want)
			}
		})
	}
}
