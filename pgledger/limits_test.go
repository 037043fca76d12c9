package pgledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/limit"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestLimits runs idemtest's conformance suite of idemstore.LimitStore on
// the Ledger (pgx pool) and on the DBLedger (pgx's stdlib; lib/pq in
// pgledger/compattest).
func TestLimits(t *testing.T) {
	t.Parallel()
	t.Run("Ledger", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		idemtest.TestLimits(t, func(t *testing.T) idem.Store { return openLedger(t, pool) })
	})
	t.Run("DBLedger", func(t *testing.T) {
		t.Parallel()
		eachDriver(t, func(t *testing.T, driver string) {
			db := openDB(t, driver)
			idemtest.TestLimits(t, func(t *testing.T) idem.Store { return openDBLedger(t, db) })
		})
	})
}

// limitHarness opens one schema from several processes: New creates a
// ledger in a fresh schema (dropped when the test ends) and returns
// "schema|dsn"; open attaches a ledger to it.
func limitHarness(open func(t *testing.T, dsn, schema string) idem.Store) idemtest.LimitHarness {
	return idemtest.LimitHarness{
		New: func(t *testing.T) string {
			if idemtest.IsChild(t) {
				return "" // the child is told where by its parent: create nothing here
			}
			l := openLedger(t, newPool(t))
			return l.Schema() + "|" + testDSN(t)
		},
		Open: func(t *testing.T, where string) idem.Store {
			schema, dsn, ok := strings.Cut(where, "|")
			if !ok {
				t.Fatalf("limit harness: %q is not schema|dsn", where)
			}
			return open(t, dsn, schema)
		},
	}
}

// TestSharedLimits runs package limit's limits in three processes on one
// schema, through the Ledger (pgx pool) and the DBLedger (pgx's stdlib).
func TestSharedLimits(t *testing.T) {
	t.Run("Ledger", func(t *testing.T) {
		idemtest.TestSharedLimits(t, limitHarness(func(t *testing.T, dsn, schema string) idem.Store {
			l, err := pgledger.Open(context.Background(), dsn, pgledger.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.Close)
			return l
		}))
	})
	t.Run("DBLedger", func(t *testing.T) {
		idemtest.TestSharedLimits(t, limitHarness(func(t *testing.T, dsn, schema string) idem.Store {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			db.SetMaxIdleConns(16) // as NewDB's doc says: 8 workers a process (with the default 2, the rate test took 74-114 s on a busy machine, not 10)
			l, err := pgledger.NewDB(context.Background(), db, pgledger.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}))
	})
}

// TestLimitsUpgradeFromVersion5: a version-5 schema (no limits) is
// upgraded in place, its records kept, and its limits work.
func TestLimitsUpgradeFromVersion5(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	l := openLedger(t, pool)
	k := idem.Key{Job: "old", Period: "2026-12-01"}
	if err := l.Run(ctx, k, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE `+table(l, "limit_rates")+`, `+table(l, "limit_slots")+`;
		UPDATE `+table(l, "meta")+` SET value = 5 WHERE name = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	up, err := pgledger.New(ctx, pool, pgledger.WithSchema(l.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT value FROM `+table(l, "meta")+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != pgledger.SchemaVersion {
		t.Fatalf("version %d, %v; want %d", v, err, pgledger.SchemaVersion)
	}
	if rec, ok, err := up.Lookup(ctx, k); err != nil || !ok || rec.Status != idem.StatusDone {
		t.Fatalf("old record %+v, %v, %v", rec, ok, err)
	}
	r, err := limit.NewRate(up, "mail", 1.0/3600, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatalf("a rate on the upgraded schema: %v", err)
	}
	a, err := limit.NewAtOnce(up, "report", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, ok, err := a.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("a place on the upgraded schema: %v, %v", ok, err)
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
}

// limitStores runs test on a fresh Ledger and a fresh DBLedger (pgx's
// stdlib), as idemstore.LimitStores, in parallel subtests.
func limitStores(t *testing.T, test func(t *testing.T, s idemstore.LimitStore)) {
	t.Run("Ledger", func(t *testing.T) {
		t.Parallel()
		test(t, openLedger(t, newPool(t)))
	})
	t.Run("DBLedger", func(t *testing.T) {
		t.Parallel()
		test(t, openDBLedger(t, openDB(t, "pgx")))
	})
}

// TestTakeRateConcurrent: 64 starts of a rate of one an hour (burst 1)
// taken at once by 16 goroutines are 64 reservations, an hour apart: no
// two concurrent takes read the same theoretical arrival time (each
// locks the limit's row, and reads its latest version).
func TestTakeRateConcurrent(t *testing.T) {
	t.Parallel()
	limitStores(t, func(t *testing.T, s idemstore.LimitStore) {
		ctx := context.Background()
		r := idemstore.Rate{PerSecond: 1.0 / 3600, Burst: 1}
		// The limit's row first: the takes below race for its lock, not
		// for its creation (which TestLimits covers).
		if _, ok, err := s.TakeRate(ctx, "mail", r, 1, time.Hour); err != nil || !ok {
			t.Fatalf("first take: %v, %v", ok, err)
		}
		var mu sync.Mutex
		var waits []time.Duration
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 4 {
					wait, ok, err := s.TakeRate(ctx, "mail", r, 1, 1000*time.Hour)
					if err != nil || !ok {
						t.Errorf("take: reserved %v, %v", ok, err)
						return
					}
					mu.Lock()
					waits = append(waits, wait)
					mu.Unlock()
				}
			})
		}
		testwait.Group(t, &wg, "16 goroutines taking 4 starts each")
		slices.Sort(waits)
		for i, w := range waits {
			// The i-th reservation after the first waits i+1 hours, less
			// the time since the first (well under a minute).
			if want := time.Duration(i+1) * time.Hour; w > want || w < want-time.Minute {
				t.Fatalf("reservation %d of %d waits %v, want about %v (waits %v)", i+1, len(waits), w, want, waits)
			}
		}
		if len(waits) != 64 {
			t.Fatalf("%d reservations, want 64", len(waits))
		}
	})
}

// TestAcquireSlotConcurrent: 16 goroutines asking at once for a place of
// an AtOnce limit of 5 get 5 places, numbered 0 to 4: no two concurrent
// acquires see the same free place (each locks the limit).
func TestAcquireSlotConcurrent(t *testing.T) {
	t.Parallel()
	limitStores(t, func(t *testing.T, s idemstore.LimitStore) {
		ctx := context.Background()
		var mu sync.Mutex
		var places []int
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				h := idemstore.SlotHolder{Owner: idemstore.Owner(), Token: fmt.Sprintf("t%d", i)}
				n, ok, _, err := s.AcquireSlot(ctx, "report", 5, h, time.Hour)
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if ok {
					mu.Lock()
					places = append(places, n)
					mu.Unlock()
				}
			})
		}
		testwait.Group(t, &wg, "16 goroutines acquiring a place")
		slices.Sort(places)
		if !slices.Equal(places, []int{0, 1, 2, 3, 4}) {
			t.Fatalf("places taken %v, want 0 to 4 once each", places)
		}
	})
}

// BenchmarkTakeRate measures a take of a rate limit that never waits (one
// statement), on the Ledger and on the DBLedger (pgx's stdlib), from
// GOMAXPROCS goroutines.
func BenchmarkTakeRate(b *testing.B) {
	for _, kind := range []string{"Ledger", "DBLedger"} {
		b.Run(kind, func(b *testing.B) {
			var s idemstore.LimitStore
			if kind == "Ledger" {
				s = openLedger(b, newPool(b))
			} else {
				s = openDBLedger(b, openDB(b, "pgx"))
			}
			benchTakeRate(b, s)
		})
	}
}

func benchTakeRate(b *testing.B, s idemstore.LimitStore) {
	ctx := context.Background()
	r := idemstore.Rate{PerSecond: 1e9, Burst: 1 << 30}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok, err := s.TakeRate(ctx, "bench", r, 1, time.Second); err != nil || !ok {
				b.Errorf("take: %v, %v", ok, err)
				return
			}
		}
	})
}

// TestRateAcrossStall runs idemtest's TestRateAcrossStall (Run),
// TestRateAcrossStallTx (RunTx) and TestRateAcrossStallEachTx on the
// Ledger: starts reserved before the store stalled do not go together with
// the burst that refilled.
func TestRateAcrossStall(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	t.Run("Run", func(t *testing.T) {
		t.Parallel()
		idemtest.TestRateAcrossStall(t, openLedger(t, pool))
	})
	t.Run("RunTx", func(t *testing.T) {
		t.Parallel()
		idemtest.TestRateAcrossStallTx[pgx.Tx](t, openLedger(t, pool))
	})
	t.Run("EachTx", func(t *testing.T) {
		t.Parallel()
		idemtest.TestRateAcrossStallEachTx[pgx.Tx](t, openLedger(t, pool))
	})
}
