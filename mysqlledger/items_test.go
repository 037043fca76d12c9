package mysqlledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// TestBigItemSet: one AddItems of 100,000 items of 200 bytes (20 MB of
// ids, above MariaDB's default max_allowed_packet of 16 MiB, which closes
// the connection of a bigger statement) records them all, in chunks of at
// most 1 MiB; adding them again adds nothing.
func TestBigItemSet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("20 MB of item ids")
	}
	ctx := context.Background()
	db := openDB(t)
	var packet int64
	if err := db.QueryRow(`SELECT @@max_allowed_packet`).Scan(&packet); err != nil {
		t.Fatal(err)
	}
	l := openLedger(t, db)
	key := idem.Key{Job: "fan", Period: "2026-12-05"}
	items := make([]string, 100_000)
	for i := range items {
		items[i] = fmt.Sprintf("%08d-", i) + strings.Repeat("x", 191)
	}
	if size := len(items) * 200; int64(size) <= packet {
		t.Fatalf("%d bytes of ids are below max_allowed_packet (%d): the test proves nothing", size, packet)
	}
	for range 2 {
		if err := l.AddItems(ctx, key, items); err != nil {
			t.Fatal(err)
		}
	}
	c, err := l.CountItems(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if c.Total() != int64(len(items)) || c.Pending != int64(len(items)) {
		t.Fatalf("counts %+v; want %d pending", c, len(items))
	}
	var chunks int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + l.Table("item_chunks")).Scan(&chunks); err != nil {
		t.Fatal(err)
	}
	if chunks < 20 {
		t.Fatalf("%d chunks; want at least 20 of 1 MiB", chunks)
	}
	b, err := l.ClaimItems(ctx, key, idemstore.ItemClaimRequest{Owner: "o", N: 10})
	if err != nil {
		t.Fatal(err)
	}
	if b.Chunk != 1 || len(b.Items) == 0 || b.Items[0].Item != items[0] {
		t.Fatalf("first claim: chunk %d, %d items", b.Chunk, len(b.Items))
	}
	t.Logf("%d items in %d chunks (max_allowed_packet %d)", len(items), chunks, packet)
}

// TestKeysAreBytes: keys that a case- or accent-folding collation, or
// PAD SPACE, would make one are different keys, and List orders them as
// Go orders strings.
func TestKeysAreBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, openDB(t))
	periods := []string{"a", "a ", "A", "á", "b", "é", "z"}
	for _, p := range periods {
		if err := l.Run(ctx, idem.Key{Job: "bytes", Period: p}, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Run %q: %v", p, err)
		}
	}
	recs, err := l.List(ctx, idemstore.Filter{Job: "bytes"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Key.Period)
	}
	want := slices.Clone(periods)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("listed %q; want %q (one record each, in Go's order)", got, want)
	}
}

// TestIdleConnectionsClosedByServer: the server closes connections idle
// longer than wait_timeout (1 s here, set through the DSN for every
// connection of the pool); the next calls, on connections the pool kept,
// still work: the driver finds a closed connection before it writes to it,
// and database/sql takes another.
func TestIdleConnectionsClosedByServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sep := "?"
	if strings.Contains(testDSN(t), "?") {
		sep = "&"
	}
	db, err := sql.Open("mysql", testDSN(t)+sep+"wait_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(4)
	l := openLedger(t, db)
	for i := range 3 {
		k := idem.Key{Job: "idle", Period: fmt.Sprintf("2026-12-0%d", i+1)}
		if err := l.RunTx(ctx, k, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatalf("RunTx %d: %v", i, err)
		}
		if i < 2 {
			time.Sleep(2 * time.Second) // past wait_timeout: the server closes the pool's idle connections
		}
	}
}

// TestFinishItemsFenced: a window's done marks (every end done: one
// UPDATE of the chunk's row) are fenced by the chunk's attempt and settled
// position. The attempt whose lease expired and was taken over gets every
// item back in lost and writes nothing; the new attempt's window lands; a
// window from a position that is not the chunk's settled one is lost too.
// The chunk's lease moves with the window.
func TestFinishItemsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, openDB(t))
	key := idem.Key{Job: "fan", Period: "2026-12-05"}
	if err := l.AddItems(ctx, key, []string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	if err := l.SealItems(ctx, key); err != nil {
		t.Fatal(err)
	}
	req := idemstore.ItemClaimRequest{Owner: "o", N: 2, Lease: time.Minute}
	old, err := l.ClaimItems(ctx, key, req)
	if err != nil || old.Chunk == 0 || old.Attempt != 1 || len(old.Items) != 4 {
		t.Fatalf("first claim: %+v, %v", old, err)
	}
	if err := shiftTimes(l, 2*time.Minute); err != nil { // the first attempt's lease expires
		t.Fatal(err)
	}
	cur, err := l.ClaimItems(ctx, key, req)
	if err != nil || cur.Chunk != old.Chunk || cur.Attempt != 2 {
		t.Fatalf("claim after the lease expired: %+v, %v", cur, err)
	}
	now := time.Now()
	ends := func(b idemstore.ItemBatch, items ...string) []idemstore.ItemEnd {
		var es []idemstore.ItemEnd
		for _, it := range items {
			es = append(es, idemstore.ItemEnd{Item: it, Attempt: b.Attempt, Status: idemstore.StatusDone, Now: now})
		}
		return es
	}
	step := func(b idemstore.ItemBatch, from int) idemstore.ItemStep {
		return idemstore.ItemStep{Chunk: b.Chunk, Attempt: b.Attempt, From: from, Next: 2, LeaseUntil: now.Add(time.Hour), Now: now}
	}
	lost, err := l.FinishItems(ctx, key, step(old, 0), ends(old, "a", "b"))
	if err != nil || !slices.Equal(lost, []string{"a", "b"}) {
		t.Fatalf("the taken-over attempt's window: lost %q, %v; want a and b lost", lost, err)
	}
	if c, _ := l.CountItems(ctx, key); c.Done != 0 {
		t.Fatalf("after the taken-over attempt's window: %+v; want nothing done", c)
	}
	if lost, err := l.FinishItems(ctx, key, step(cur, 0), ends(cur, "a", "b")); err != nil || len(lost) != 0 {
		t.Fatalf("the current attempt's window: lost %q, %v", lost, err)
	}
	if lost, err := l.FinishItems(ctx, key, step(cur, 0), ends(cur, "a", "b")); err != nil || len(lost) != 2 {
		t.Fatalf("the same window again (the chunk's settled position moved): lost %q, %v; want both", lost, err)
	}
	var lease, settled int64
	if err := l.DB().QueryRow(`SELECT lease_until - `+"CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS SIGNED)"+`, settled FROM `+
		l.Table("item_chunks")+` WHERE job = ? AND period = ? AND chunk = ?`, key.Job, key.Period, cur.Chunk).Scan(&lease, &settled); err != nil {
		t.Fatal(err)
	}
	if settled != 2 || lease < (50*time.Minute).Microseconds() {
		t.Fatalf("the chunk after the window: settled %d, lease %v from now; want 2 and about an hour", settled, time.Duration(lease)*time.Microsecond)
	}
	if c, _ := l.CountItems(ctx, key); c.Done != 2 {
		t.Fatalf("after the current attempt's window: %+v; want 2 done", c)
	}
}
