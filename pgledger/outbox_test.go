package pgledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestOutboxConformance runs idemtest's outbox suite on both ledgers.
func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		idemtest.TestOutbox(t, idemtest.OutboxHarness[pgx.Tx]{Open: func(t *testing.T) idem.TxStore[pgx.Tx] { return openLedger(t, pool) }, Shift: kitShift})
	})
	for _, driver := range sqlDrivers {
		t.Run("database/sql "+driver, func(t *testing.T) {
			t.Parallel()
			db := openDB(t, driver)
			idemtest.TestOutbox(t, idemtest.OutboxHarness[*sql.Tx]{Open: func(t *testing.T) idem.TxStore[*sql.Tx] { return openDBLedger(t, db) }, Shift: kitShift})
		})
	}
}

// TestOutboxTwoRelays: two relays, each with a pool of its own, share one
// outbox over many rounds; with no crash in between, no message is
// delivered twice, every one is delivered, and each topic's messages
// arrive in order.
func TestOutboxTwoRelays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, newPool(t))
	other, err := pgledger.New(ctx, newPool(t), pgledger.WithSchema(l.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	relays := []*pgledger.Ledger{l, other}
	const rounds, topics, per = 10, 8, 3
	for round := range rounds {
		// Writers queue per messages on each topic, in transactions of
		// their own, while the two relays run.
		var mu sync.Mutex
		got := map[string]int{}
		order := map[string][]string{}
		deliver := outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			got[d.ID]++
			order[d.Topic] = append(order[d.Topic], d.ID)
			return nil
		})
		var wg sync.WaitGroup
		var ids []string // of the committed attempts
		for w := range topics {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					key := idem.Key{Job: fmt.Sprintf("w%d", w), Period: fmt.Sprintf("r%d-%d", round, i)}
					var mine []string
					err := l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
						mine = mine[:0]
						// Two topics, in a fixed order (the lower first): see
						// Ledger.PutOutbox on deadlocks.
						tps := []int{w, (w + 1) % topics}
						slices.Sort(tps)
						for _, tp := range tps {
							id, err := outbox.Put(ctx, tx, outbox.Message{Topic: fmt.Sprintf("r%d-t%d", round, tp), Payload: []byte(key.String())})
							if err != nil {
								return err
							}
							mine = append(mine, id)
						}
						return nil
					}, idem.WaitForTurn())
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					ids = append(ids, mine...)
					mu.Unlock()
				}
			}()
		}
		stop := make(chan struct{})
		var rw sync.WaitGroup
		for i, r := range relays {
			rw.Add(1)
			go func() {
				defer rw.Done()
				for {
					if _, err := outbox.RelayOnce(ctx, r, deliver, outbox.WithBatch(3), outbox.WithOwner(fmt.Sprintf("relay-%d", i))); err != nil {
						t.Error(err)
						return
					}
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond): // pacing, not a wait for anything
					}
				}
			}()
		}
		wg.Wait()
		// One more pass each after the writers are done.
		close(stop)
		rw.Wait()
		for _, r := range relays {
			if _, err := outbox.RelayOnce(ctx, r, deliver); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		for _, id := range ids {
			n++
			if got[id] != 1 {
				t.Fatalf("round %d: %s delivered %d times", round, id, got[id])
			}
		}
		if n != 2*topics*per || len(got) != n {
			t.Fatalf("round %d: %d messages put, %d delivered", round, n, len(got))
		}
		// Per topic, deliveries in the store's order.
		for topic, delivered := range order {
			recs, err := l.ListOutbox(ctx, idemstore.OutboxFilter{Topic: topic})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				if delivered[i] != r.ID {
					t.Fatalf("round %d: topic %s delivered %v, stored order %v", round, topic, delivered, recs)
				}
			}
		}
		if t.Failed() {
			return
		}
	}
}

// TestOutboxUpgradeFromVersion4: a version-4 schema (no outbox) is
// upgraded in place, its records kept, and its outbox works.
func TestOutboxUpgradeFromVersion4(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	k := idem.Key{Job: "old", Period: "2026-10-26"}
	if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE `+table(l, "outbox")+`;
		UPDATE `+table(l, "meta")+` SET value = 4 WHERE name = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	ls := newConcurrently(t, 3, l.Schema())
	if t.Failed() {
		return
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT value FROM `+table(l, "meta")+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != pgledger.SchemaVersion {
		t.Fatalf("version %d, %v; want %d", v, err, pgledger.SchemaVersion)
	}
	if rec, ok, err := ls[0].Lookup(ctx, k); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("old record %+v, %v, %v", rec, ok, err)
	}
	k2 := idem.Key{Job: "new", Period: "2026-10-27"}
	err := ls[1].RunTx(ctx, k2, func(ctx context.Context, tx pgx.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t", Payload: []byte("after the upgrade")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	res, err := outbox.RelayOnce(ctx, ls[2], outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		got = append(got, d.ID)
		return nil
	}))
	if err != nil || res.Delivered != 1 || len(got) != 1 || got[0] != k2.RequestID()+"-0" {
		t.Fatalf("relay on the upgraded schema: %+v, %v, %v", res, got, err)
	}
}

// fillOutbox writes n pending messages into l's outbox in one statement,
// as PutOutbox writes them: message i (from 0) of topic "t<i % topics>",
// in seq order. It is setup: a backlog of tens of thousands of messages
// put one RunTx at a time would be most of the test's time.
func fillOutbox(t *testing.T, l schemaLedger, n, topics int) {
	t.Helper()
	s := pgx.Identifier{l.Schema()}.Sanitize()
	err := execIn(context.Background(), l, `INSERT INTO `+s+`.outbox (id, topic, payload, job, period, created)
		SELECT 'backlog/p' || lpad(g::text, 6, '0') || '-0', 't' || (g % `+fmt.Sprint(topics)+`), '\x7b7d', 'backlog', 'p' || lpad(g::text, 6, '0'),
			(extract(epoch FROM clock_timestamp()) * 1e6)::bigint
		FROM generate_series(0, `+fmt.Sprint(n-1)+`) AS g ORDER BY g`)
	if err != nil {
		t.Fatal(err)
	}
}

// TestOutboxClaimBacklog: with a backlog of 20,000 pending messages on 4
// topics, a claim of 32 with runs (OutboxClaimRequest.Run, which a relay
// asks of a store that can give claims back) takes 32 messages, not one
// a topic: each topic's run in Seq order, its head first; and while
// another relay holds two topics' heads, a claim takes runs of the other
// two, and nothing after a held head. On both ledgers.
func TestOutboxClaimBacklog(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		open func(t *testing.T) schemaLedger
	}{
		{"pgx", func(t *testing.T) schemaLedger { return openLedger(t, newPool(t)) }},
		{"database/sql", func(t *testing.T) schemaLedger { return openDBLedger(t, openDB(t, "pgx")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := c.open(t)
			s, ok := l.(idemstore.OutboxReleaser)
			if !ok {
				t.Fatalf("%T is no idemstore.OutboxReleaser: a relay claims one message a topic from it", l)
			}
			const backlog, topics = 20_000, 4
			fillOutbox(t, l, backlog, topics)
			now := time.Now()
			claim := func(owner string, n, run int) []idemstore.OutboxRecord {
				t.Helper()
				recs, err := s.ClaimOutbox(ctx, idemstore.OutboxClaimRequest{N: n, Run: run, Owner: owner, Now: now, Lease: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				return recs
			}
			// checkRuns checks that recs are in Seq order and that each
			// topic's are the first pending ones of the topic after
			// skip of them (message i of topic k is number i*topics+k).
			checkRuns := func(what string, recs []idemstore.OutboxRecord, skip map[string]int) {
				t.Helper()
				next := map[string]int{}
				for i, r := range recs {
					if i > 0 && r.Seq <= recs[i-1].Seq {
						t.Fatalf("%s: not in Seq order: %d after %d", what, r.Seq, recs[i-1].Seq)
					}
					var k int
					fmt.Sscanf(r.Topic, "t%d", &k)
					want := fmt.Sprintf("backlog/p%06d-0", (skip[r.Topic]+next[r.Topic])*topics+k)
					if r.ID != want || r.Attempts != 1 {
						t.Fatalf("%s: message %d is %s (attempt %d), want %s at attempt 1: a topic's run is its first pending messages, in order",
							what, i, r.ID, r.Attempts, want)
					}
					next[r.Topic]++
				}
			}
			// One relay holds the heads of t0 and t1 (the oldest two).
			held := claim("r1", 2, 1)
			checkRuns("r1's claim", held, nil)
			if len(held) != 2 || held[0].Topic != "t0" || held[1].Topic != "t1" {
				t.Fatalf("r1's claim of 2 without runs took %d messages (%v), want the heads of t0 and t1", len(held), held)
			}
			// Another takes runs of t2 and t3: 32 messages.
			got := claim("r2", 32, 32)
			if len(got) != 32 {
				t.Fatalf("with %d messages pending on %d topics and two topics' heads held, a claim of 32 with runs took %d messages, want 32",
					backlog, topics, len(got))
			}
			checkRuns("r2's claim", got, nil)
			for _, r := range got {
				if r.Topic != "t2" && r.Topic != "t3" {
					t.Fatalf("r2's claim took %s of %s, whose head r1 holds", r.ID, r.Topic)
				}
			}
			// Every head is held now: nothing is due.
			if again := claim("r3", 32, 32); len(again) != 0 {
				t.Fatalf("a claim took %d messages while every topic's head was held (first %s)", len(again), again[0].ID)
			}
			// r1's heads delivered, r2's claims given back: a claim of 32
			// takes runs of every topic, after the delivered ones.
			for _, r := range held {
				if err := s.DeliveredOutbox(ctx, r.ID, r.Token, now); err != nil {
					t.Fatal(err)
				}
			}
			var back []idemstore.OutboxClaimed
			for _, r := range got {
				back = append(back, idemstore.OutboxClaimed{ID: r.ID, Token: r.Token})
			}
			if err := s.ReleaseOutbox(ctx, back); err != nil {
				t.Fatal(err)
			}
			all := claim("r4", 32, 32)
			if len(all) != 32 {
				t.Fatalf("a claim of 32 with runs took %d messages, want 32", len(all))
			}
			checkRuns("r4's claim", all, map[string]int{"t0": 1, "t1": 1})
		})
	}
}

// TestOutboxClaimRunStopsAtLocked: a claim passes over rows another
// transaction holds locked (an operator's drop, another claim) without
// skipping one: a topic whose head is locked gives nothing, not the
// message after it, and a run ends before a locked message instead of
// going on after it.
func TestOutboxClaimRunStopsAtLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	l := openLedger(t, pool)
	fillOutbox(t, l, 12, 2) // t0: p0, p2, ..., p10; t1: p1, p3, ..., p11
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	s := pgx.Identifier{l.Schema()}.Sanitize()
	// t0's head and t1's third message are held.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+s+`.outbox WHERE id IN ('backlog/p000000-0', 'backlog/p000005-0') FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a claim that waited for the locks would wait for ever
	defer cancel()
	recs, err := l.ClaimOutbox(cctx, idemstore.OutboxClaimRequest{N: 32, Run: 32, Owner: "r", Now: time.Now(), Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim while rows were locked: %v", err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	if want := []string{"backlog/p000001-0", "backlog/p000003-0"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claim took %v while t0's head and t1's third message were locked, want %v", got, want)
	}
}

// TestOutboxLeasesOnServerClock: two relays on hosts whose clocks disagree
// (the second's two minutes ahead, past the first's one-minute lease)
// share one outbox. The second never takes a message the first is
// delivering, nor one whose backoff the first set, before the database's
// clock says so: leases and backoff deadlines are the server's, as the
// runs' are. (On the relays' clocks, the second handed out the message
// being delivered, and the retry a minute early.)
func TestOutboxLeasesOnServerClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, newPool(t))
	ahead, err := pgledger.New(ctx, newPool(t), pgledger.WithSchema(l.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	aheadClock := outbox.WithClock(idemtest.NewClock(time.Now().Add(2 * time.Minute)))
	put := func(period string) string {
		t.Helper()
		var id string
		err := l.RunTx(ctx, idem.Key{Job: "clocks", Period: period}, func(ctx context.Context, tx pgx.Tx) error {
			var err error
			id, err = outbox.Put(ctx, tx, outbox.Message{Topic: "t", Payload: []byte(period)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	var mu sync.Mutex
	got := map[string]int{} // deliveries per message, by either relay
	count := func(d outbox.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		got[d.ID]++
	}

	// The first relay holds a message mid-delivery; the second, ahead,
	// must find nothing to do.
	id := put("held")
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := outbox.RelayOnce(ctx, l, outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
			count(d)
			close(holding)
			<-release
			return nil
		}))
		done <- err
	}()
	testwait.Recv(t, holding, "the first relay to start delivering %s", id)
	res, err := outbox.RelayOnce(ctx, ahead, outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		count(d)
		return nil
	}), aheadClock)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, done, "the first relay to end"); err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 0 || got[id] != 1 {
		t.Fatalf("a relay two minutes ahead, while another held %s for its one-minute lease: %+v, delivered %d times; want nothing claimed, once", id, res, got[id])
	}

	// The first relay's delivery fails with a minute's backoff; the second
	// is ahead by two, and still must wait for the server's minute.
	id = put("backoff")
	res, err = outbox.RelayOnce(ctx, l, outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		count(d)
		return errors.New("receiver down")
	}), outbox.WithBackoff(idem.Constant(time.Minute)))
	if err != nil || res.Retrying != 1 {
		t.Fatalf("first relay: %+v, %v; want one failure", res, err)
	}
	ok := outbox.DeliverFunc(func(_ context.Context, d outbox.Delivery) error {
		count(d)
		return nil
	})
	if res, err := outbox.RelayOnce(ctx, ahead, ok, aheadClock); err != nil || res.Claimed != 0 {
		t.Fatalf("a relay two minutes ahead, during a one-minute backoff on the server: %+v, %v; want nothing claimed", res, err)
	}
	shift(t, l, time.Minute+time.Second) // the server's minute passes
	if res, err := outbox.RelayOnce(ctx, ahead, ok, aheadClock); err != nil || res.Delivered != 1 {
		t.Fatalf("after the backoff: %+v, %v; want the retry delivered", res, err)
	}
	if got[id] != 2 {
		t.Fatalf("message %s delivered %d times, want 2 (the failure and the retry)", id, got[id])
	}
}
