package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// pointLog records the crash points a context's runs reach.
type pointLog struct {
	mu     sync.Mutex
	points []idemstore.Point
}

func (p *pointLog) ctx() context.Context {
	return idemstore.WithTrace(context.Background(), &idemstore.Trace{Checkpoint: func(_ context.Context, at idemstore.Point, _ idem.Key) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.points = append(p.points, at)
		return nil
	}})
}

// TestItemWindowFenced: a window of FinishItemsTx (idemstore.RunItemWindow
// over the SQLite ledger's transaction) runs fn only for the claims still
// held, rolls back a failed item's writes alone, and reaches the after-fn
// point once, before its commit; a window whose every claim is lost runs no
// fn, writes nothing and reaches no point.
func TestItemWindowFenced(t *testing.T) {
	l := openLedger(t, t.TempDir())
	ctx := context.Background()
	if _, err := l.DB().ExecContext(ctx, `CREATE TABLE granted (item TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := store(t, l).AddItems(ctx, points, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claim := func(owner string, at time.Time) idemstore.ItemBatch {
		t.Helper()
		b, err := store(t, l).ClaimItems(ctx, points, idemstore.ItemClaimRequest{N: 3, Owner: owner, Now: at, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var ran []string
	fn := func(tx *sql.Tx, c idemstore.ItemClaim) error {
		ran = append(ran, c.Item)
		if _, err := tx.Exec(`INSERT INTO granted(item) VALUES(?)`, c.Item); err != nil {
			return err
		}
		if c.Item == "b" {
			return errors.New("b fails")
		}
		return nil
	}
	failed := func(c idemstore.ItemClaim, err error) idemstore.ItemEnd {
		return idemstore.ItemEnd{Item: c.Item, Attempt: c.Attempt, Status: idem.StatusFailed, Failures: 1, Error: err.Error(), Now: now, NotBefore: now.Add(time.Hour)}
	}
	granted := func() []string {
		t.Helper()
		rows, err := l.DB().QueryContext(ctx, `SELECT item FROM granted ORDER BY item`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var items []string
		for rows.Next() {
			var it string
			if err := rows.Scan(&it); err != nil {
				t.Fatal(err)
			}
			items = append(items, it)
		}
		return items
	}

	// A's chunk is taken over once its lease expired: A's window is lost.
	a := claim("a", now)
	b := claim("b", now.Add(2*time.Minute))
	if a.Chunk != 1 || b.Chunk != 1 || b.Attempt != 2 {
		t.Fatalf("claims %+v, %+v; want chunk 1 taken over", a, b)
	}
	var log pointLog
	step := idemstore.ItemStep{Chunk: a.Chunk, Attempt: a.Attempt, From: a.Pos, Now: now, LeaseUntil: now.Add(time.Minute)}
	ends, lost, err := store(t, l).FinishItemsTx(log.ctx(), points, step, a.Items, fn, failed)
	if err != nil || ends != nil || !slices.Equal(lost, []string{"a", "b", "c"}) || ran != nil || log.points != nil || granted() != nil {
		t.Fatalf("lost window: ends %v, lost %v, %v; fn ran for %v, points %v, granted %v", ends, lost, err, ran, log.points, granted())
	}

	// B's window: b fails and is rolled back alone; the point is reached once.
	step = idemstore.ItemStep{Chunk: b.Chunk, Attempt: b.Attempt, From: b.Pos, Now: now, LeaseUntil: now.Add(time.Minute)}
	ends, lost, err = store(t, l).FinishItemsTx(log.ctx(), points, step, b.Items, fn, failed)
	if err != nil || len(lost) != 0 || len(ends) != 3 || ends[1].Status != idem.StatusFailed || ends[0].Status != idem.StatusDone || ends[2].Status != idem.StatusDone {
		t.Fatalf("window: ends %+v, lost %v, %v", ends, lost, err)
	}
	if !slices.Equal(ran, []string{"a", "b", "c"}) || !slices.Equal(granted(), []string{"a", "c"}) || !slices.Equal(log.points, []idemstore.Point{idemstore.AfterFn}) {
		t.Fatalf("fn ran for %v, granted %v, points %v; want a b c, a c, one after-fn", ran, granted(), log.points)
	}
	if c, err := l.CountItems(ctx, points); err != nil || c.Done != 2 || c.Failed != 1 {
		t.Fatalf("counts %+v, %v; want 2 done, 1 failed", c, err)
	}
}
