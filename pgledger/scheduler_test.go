package pgledger_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openSchema is a schedtest.Opener of the ledger in schema, through a pool
// of its own (a replica's).
func openSchema(ctx context.Context, schema string) (idem.Store, func(), error) {
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		return nil, nil, err
	}
	l, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return l, pool.Close, nil
}

// newSchema creates a ledger in a fresh schema, dropped when t ends, and
// returns the schema's name (in the parent only: a child gets it in its
// argument).
func newSchema(t *testing.T) string {
	if idemtest.IsChild(t) {
		return ""
	}
	pool := newPool(t)
	return openLedger(t, pool).Schema()
}

// TestSchedulerReplicas: three Schedulers in goroutines, each on a pool of
// its own, on one Postgres ledger run each period of two jobs exactly once.
func TestSchedulerReplicas(t *testing.T) {
	testDSN(t)
	schedtest.Goroutines(t, newSchema(t), openSchema)
}

// TestSchedulerReplicaProcesses: three replicas in processes of their own
// on one Postgres ledger run each period once; the one SIGKILLed in the
// middle of a period leaves it to another, which finishes it.
func TestSchedulerReplicaProcesses(t *testing.T) {
	testDSN(t)
	schedtest.Processes(t, newSchema(t), openSchema)
}

// TestSchedulerEachReplicas: three Schedulers (goroutines, each on a pool
// of two connections of its own) on one Postgres ledger run a daily job
// whose fn applies idem.Each to the day's 1,200 items, with two workers:
// over four days each day's items are applied exactly once, and each
// day's item set is sealed and done, whichever replica ran the day (the
// item set's turn holds one of the replica's two connections while it
// records).
func TestSchedulerEachReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := openLedger(t, newPool(t)).Schema()
	clk := schedtest.NewClock(time.Date(2026, 3, 1, 0, 30, 0, 0, time.UTC))
	var mu sync.Mutex
	applied := map[string]int{} // period/item
	var scheds []*idem.Scheduler
	for range 3 {
		l := openAs(t, "", schema, uniqueName("sched_each_"), 2)
		s := idem.NewScheduler(l, idem.WithClock(clk))
		err := s.Add("grant", idem.Daily(time.UTC), func(ctx context.Context, p idem.Period) error {
			_, err := idem.Each(ctx, l, idem.Key{Job: "grant-items", Period: p.Name}, accounts(turnItems),
				func(_ context.Context, item string) error {
					mu.Lock()
					applied[p.Name+"/"+item]++
					mu.Unlock()
					return nil
				}, idem.WithWorkers(2))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		schedtest.Serve(t, s)
		scheds = append(scheds, s)
	}
	days := []string{"2026-02-28", "2026-03-01", "2026-03-02", "2026-03-03"}
	for i := range days {
		if i > 0 {
			clk.Advance(24 * time.Hour)
		}
		for _, s := range scheds {
			schedtest.Idle(t, s, clk.Now())
		}
	}
	check, err := pgledger.New(ctx, newPool(t), pgledger.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, day := range days {
		for _, it := range accountList(turnItems) {
			if n := applied[day+"/"+it]; n != 1 {
				t.Fatalf("%s of %s applied %d times, want once", it, day, n)
			}
		}
		k := idem.Key{Job: "grant-items", Period: day}
		c, err := check.CountItems(ctx, k)
		if err != nil || !c.Sealed || c.Done != turnItems {
			t.Fatalf("%s: counts %+v, %v; want %d done, sealed", k, c, err, turnItems)
		}
		if rec, ok, err := check.Lookup(ctx, k); err != nil || !ok || rec.Status != idem.StatusDone {
			t.Fatalf("%s: %+v, %v, %v; want done", k, rec, ok, err)
		}
	}
	if len(applied) != len(days)*turnItems {
		t.Fatalf("%d items applied, want %d (%d days of %d)", len(applied), len(days)*turnItems, len(days), turnItems)
	}
}

// TestSchedulerWakeOnReset: three replicas in processes of their own on
// one Postgres ledger with a daily job whose period is parked; a reset
// from another process is run by one of them within seconds
// (idem.SchedulerWakePoll), not at the next day's due time, and exactly
// once.
func TestSchedulerWakeOnReset(t *testing.T) {
	testDSN(t)
	schedtest.WakeProcesses(t, newSchema(t), openSchema)
}
