package pgledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
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
		idemtest.TestOutbox(t, func(t *testing.T) idem.TxStore[pgx.Tx] { return openLedger(t, pool) })
	})
	for _, driver := range []string{"pgx", "postgres"} {
		t.Run("database/sql "+driver, func(t *testing.T) {
			t.Parallel()
			db := openDB(t, driver)
			idemtest.TestOutbox(t, func(t *testing.T) idem.TxStore[*sql.Tx] { return openDBLedger(t, db) })
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
