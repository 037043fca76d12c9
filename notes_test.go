package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/holder"
)

// skipNoOwner skips t when owner is "" (see deadOwner).
func skipNoOwner(t *testing.T, owner string) {
	if owner == "" {
		t.Skip("HolderGone cannot prove a process dead here (an owner without scope)")
	}
}

// TestAbandonedNotesShared: when a claim takes over an attempt that ended
// without a done mark, the SQLite ledger (a key's claim, written in Go, and
// a single item's, written in SQL) and the state file record the note of
// idemstore.AbandonedNote, to the letter.
func TestAbandonedNotesShared(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 10, 27, 3, 4, 5, 123456000, time.UTC)

	t.Run("ledger claim", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			owner string
			after time.Duration // the second claim, after the first
		}{
			{"lease expired", "a", 2 * time.Minute},
			{"process died", holder.EndedForTest(), time.Second},
		} {
			t.Run(c.name, func(t *testing.T) {
				skipNoOwner(t, c.owner)
				l := openLedger(t, t.TempDir())
				k := idem.Key{Job: "notes", Period: c.name}
				if cl, err := store(t, l).Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: c.owner, Now: now, Lease: time.Minute}); err != nil || cl.State != idemstore.ClaimAcquired {
					t.Fatalf("%s: first claim %+v, %v", c.name, cl, err)
				}
				held := mustLookup(t, l, k)
				at := now.Add(c.after)
				cl, err := store(t, l).Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Now: at, Lease: time.Minute})
				if err != nil || cl.State != idemstore.ClaimAcquired || !cl.Doubt {
					t.Fatalf("%s: takeover %+v, %v", c.name, cl, err)
				}
				want := idemstore.AbandonedNote(held, at)
				if cl.Record.LastError != want || mustLookup(t, l, k).LastError != want {
					t.Fatalf("%s: note %q (stored %q), want %q", c.name, cl.Record.LastError, mustLookup(t, l, k).LastError, want)
				}
			})
		}
	})

	t.Run("ledger item", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			owner string
			lease time.Duration // the abandoned attempt's lease end, from now
		}{
			{"lease expired", "c", -time.Second},
			{"process died", holder.EndedForTest(), time.Hour},
		} {
			t.Run(c.name, func(t *testing.T) {
				skipNoOwner(t, c.owner)
				l := openLedger(t, t.TempDir())
				k := idem.Key{Job: "notes", Period: "2026-10-27"}
				until := now.Add(c.lease)
				if _, err := l.DB().ExecContext(ctx, `INSERT INTO idem_item_state(job, period, item, status, attempt, owner, lease_until, updated)
				VALUES(?, ?, 'x', 'running', 2, ?, ?, ?)`, k.Job, k.Period, c.owner, until.UnixMicro(), now.UnixMicro()); err != nil {
					t.Fatal(err)
				}
				b, err := store(t, l).ClaimItems(ctx, k, idemstore.ItemClaimRequest{N: 10, Owner: "d", Now: now, Lease: time.Minute})
				if err != nil || len(b.Items) != 1 || !b.Items[0].Doubt {
					t.Fatalf("%s: takeover %+v, %v", c.name, b, err)
				}
				var note string
				if err := l.DB().QueryRowContext(ctx, `SELECT last_error FROM idem_item_state WHERE item = 'x'`).Scan(&note); err != nil {
					t.Fatal(err)
				}
				want := idemstore.AbandonedNote(idemstore.Record{Attempt: 2, Owner: c.owner, LeaseUntil: until}, now)
				if note != want {
					t.Fatalf("%s: note %q, want %q", c.name, note, want)
				}
			})
		}
	})

	t.Run("state file", func(t *testing.T) {
		s := openState(t, t.TempDir())
		k := idem.Key{Job: "notes", Period: "2026-10-27"}
		cl, err := stateStore(t, s).Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "a", Now: now, Lease: time.Minute, Durable: true})
		if err != nil || cl.State != idemstore.ClaimAcquired {
			t.Fatalf("first claim %+v, %v", cl, err)
		}
		held := mustLookup(t, s, k)
		stateStore(t, s).Release(k, cl.Attempt) // as the kernel does when the holder dies
		cl, err = stateStore(t, s).Claim(ctx, idemstore.ClaimRequest{Key: k, Owner: "b", Now: now, Lease: time.Minute})
		if err != nil || cl.State != idemstore.ClaimAcquired || !cl.Doubt {
			t.Fatalf("takeover %+v, %v", cl, err)
		}
		if want := idemstore.AbandonedNote(held, now); cl.Record.LastError != want {
			t.Fatalf("note %q, want %q", cl.Record.LastError, want)
		}
	})
}
