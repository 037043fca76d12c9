package pgledger_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// TestEachRecordsNoItemRows: Each records a period's item set per chunk
// (RecordItems): no row per item in item_set, one item list per chunk, and
// the first recorder's chunks in two batches of statements for 1,200
// items (the first window's 500, then the rest); the set it seals holds
// every item once.
func TestEachRecordsNoItemRows(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	var mu sync.Mutex
	ran := map[string]int{}
	res, err := idem.Each(ctx, l, points, accounts(1200), func(_ context.Context, item string) error {
		mu.Lock()
		ran[item]++
		mu.Unlock()
		return nil
	}, idem.WithWorkers(1), idem.WithBatch(500))
	if err != nil || res.Outcome != idem.Ran || res.Counts.Done != 1200 || res.Counts.Total() != 1200 {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	for _, it := range accountList(1200) {
		if ran[it] != 1 {
			t.Fatalf("%s ran %d times", it, ran[it])
		}
	}
	var rows, lists, unchecked int
	err = l.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM `+table(l, "item_set")+` WHERE job = $1 AND period = $2),
		(SELECT count(*) FROM `+table(l, "item_lists")+` WHERE job = $1 AND period = $2),
		(SELECT count(*) FROM `+table(l, "item_chunks")+` WHERE job = $1 AND period = $2 AND NOT checked)`,
		points.Job, points.Period).Scan(&rows, &lists, &unchecked)
	if err != nil || rows != 0 || lists != 3 || unchecked != 0 {
		t.Fatalf("item_set rows %d, item lists %d, unchecked chunks %d, %v; want 0, 3 (chunks of 500) and 0", rows, lists, unchecked, err)
	}
}

// TestRecordItemsCheckedAtSeal: the ItemRecorder contract, step by step.
// RecordItems' chunks are not claimed before SealItems; AddItems' chunks
// are, as always; SealItems removes from the unchecked chunks every item
// recorded before (by an earlier chunk, or by AddItems), a chunk left empty
// is done, and then every item is claimed once.
func TestRecordItemsCheckedAtSeal(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	// Chunk 1: a b c (the duplicate a once); chunk 2: c d.
	if err := l.RecordItems(ctx, points, [][]string{{"a", "b", "c", "a"}, {"c", "d"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordItems(ctx, points, [][]string{{"c", "d"}}); err != nil { // the same chunk again: nothing
		t.Fatal(err)
	}
	if b := claimer(t, l, "early", idem.DefaultLease)(10, true); len(b.Items) != 0 || b.Chunk != 0 {
		t.Fatalf("claimed an unchecked chunk: %+v", b)
	}
	checkCounts(t, l, idem.ItemCounts{Pending: 5}) // c twice until the seal: documented
	// Chunk 3, by AddItems: checked against item_set only, claimable at once.
	if err := l.AddItems(ctx, points, []string{"e", "b"}); err != nil {
		t.Fatal(err)
	}
	// Chunk 4: nothing new.
	if err := l.RecordItems(ctx, points, [][]string{{"d", "c"}}); err != nil {
		t.Fatal(err)
	}
	a := claimer(t, l, "a", idem.DefaultLease)(10, false)
	if a.Chunk != 3 || !slices.Equal(claimedItems(a), []string{"e", "b"}) {
		t.Fatalf("claim before the seal: %+v; want chunk 3 (AddItems')", a)
	}
	if lost, err := l.FinishItems(ctx, points, step(a, 0, 0, idem.DefaultLease), doneEnds(a.Items)); err != nil || len(lost) != 0 {
		t.Fatalf("finish: lost %v, %v", lost, err)
	}
	if err := l.SealItems(ctx, points); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordItems(ctx, points, [][]string{{"late"}}); err != nil { // sealed: nothing
		t.Fatal(err)
	}
	if err := l.SealItems(ctx, points); err != nil { // again: nothing changes
		t.Fatal(err)
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Pending: 3, Done: 2})
	want := map[int64][]string{1: {"a", "c"}, 2: {"d"}} // b went with AddItems' chunk 3, c with chunk 1
	for range 2 {
		b := claimer(t, l, "b", idem.DefaultLease)(10, false)
		if w, ok := want[b.Chunk]; !ok || !slices.Equal(claimedItems(b), w) {
			t.Fatalf("claim after the seal: chunk %d %v; want one of %v", b.Chunk, claimedItems(b), want)
		}
		delete(want, b.Chunk)
		if lost, err := l.FinishItems(ctx, points, step(b, 0, 0, idem.DefaultLease), doneEnds(b.Items)); err != nil || len(lost) != 0 {
			t.Fatalf("finish: lost %v, %v", lost, err)
		}
	}
	if b := claimer(t, l, "c", idem.DefaultLease)(10, true); len(b.Items) != 0 {
		t.Fatalf("claimed more: %+v (chunk 4 holds nothing new)", b)
	}
	checkCounts(t, l, idem.ItemCounts{Sealed: true, Done: 5})
}

// TestEachHostsRecordInAnyOrder: four hosts (a pool each) run Each of one
// period at once, each generating the set in an order of its own, with
// duplicates, so that their chunks differ and overlap: every item runs
// once.
func TestEachHostsRecordInAnyOrder(t *testing.T) {
	t.Parallel()
	const n = 2500
	ls := newConcurrently(t, 4, openLedger(t, newPool(t)).Schema())
	if t.Failed() {
		return
	}
	ctx := context.Background()
	all := accountList(n)
	var mu sync.Mutex
	ran := map[string]int{}
	var wg sync.WaitGroup
	errs := make([]error, len(ls))
	for h, l := range ls {
		order := slices.Clone(all)
		switch h {
		case 1:
			slices.Reverse(order)
		case 2:
			order = append(order[1234:], order[:1234]...)
		case 3:
			order = append(order, all[:700]...) // every id of the first 700 twice
		}
		wg.Go(func() {
			_, errs[h] = idem.Each(ctx, l, points, func(yield func(string, error) bool) {
				for _, it := range order {
					if !yield(it, nil) {
						return
					}
				}
			}, func(_ context.Context, item string) error {
				mu.Lock()
				ran[item]++
				mu.Unlock()
				return nil
			}, idem.WithWorkers(2))
		})
	}
	testwait.Group(t, &wg, "4 hosts' Each of %d items", n)
	for h, err := range errs {
		if err != nil {
			t.Fatalf("host %d: %v", h, err)
		}
	}
	if len(ran) != n {
		t.Fatalf("%d items ran, want %d", len(ran), n)
	}
	for it, c := range ran {
		if c != 1 {
			t.Fatalf("%s ran %d times", it, c)
		}
	}
	c, err := ls[0].CountItems(ctx, points)
	if err != nil || c.Done != n || c.Total() != n || !c.Sealed {
		t.Fatalf("counts %+v, %v; want %d done", c, err, n)
	}
}

// TestRecordItemsRefusesSeparator: a chunk's items travel to and from the
// server joined by U+001F, which no item of Each can hold (it refuses every
// control character); RecordItems called with one refuses it, naming the
// item and the key, and records nothing of the call; an empty item too.
func TestRecordItemsRefusesSeparator(t *testing.T) {
	t.Parallel()
	l := openLedger(t, newPool(t))
	ctx := context.Background()
	err := l.RecordItems(ctx, points, [][]string{{"a", "b"}, {"c", "d\x1fe"}})
	if err == nil || !strings.Contains(err.Error(), `"d\x1fe"`) || !strings.Contains(err.Error(), points.Period) {
		t.Fatalf("RecordItems with an item holding U+001F: %v; want an error naming the item and the key", err)
	}
	// An empty item, which a text of its own cannot tell from none, is
	// refused too (as Each refuses it).
	if err := l.RecordItems(ctx, points, [][]string{{""}}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("RecordItems with an empty item: %v; want an error saying so", err)
	}
	var lists int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table(l, "item_lists")+` WHERE job = $1 AND period = $2`,
		points.Job, points.Period).Scan(&lists); err != nil || lists != 0 {
		t.Fatalf("item lists after the refused call: %d, %v; want 0", lists, err)
	}
	// The separator splits nothing else: items with spaces, quotes, commas,
	// braces and backslashes (what a text array's literal quotes) come back
	// as given.
	odd := []string{`a b`, `"q"`, `x,y`, `{z}`, `back\slash`, `NULL`, `é`}
	if err := l.RecordItems(ctx, points, [][]string{odd}); err != nil {
		t.Fatal(err)
	}
	if err := l.SealItems(ctx, points); err != nil {
		t.Fatal(err)
	}
	var got []string
	res, err := idem.Each(ctx, l, points, idem.Items(slices.Values(odd)), func(_ context.Context, item string) error {
		got = append(got, item)
		return nil
	}, idem.WithWorkers(1))
	if err != nil || res.Counts.Done != int64(len(odd)) {
		t.Fatalf("Each: %v, %+v", err, res)
	}
	slices.Sort(got)
	want := slices.Clone(odd)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("items claimed %q, want %q", got, want)
	}
}
