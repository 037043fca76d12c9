package pgtest

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Harness opens ledgers in fresh schemas of pool for idemtest's
// conformance kit.
func Harness(pool *pgxpool.Pool) idemtest.Harness {
	return idemtest.Harness{
		Open: func(t *testing.T, clk idem.Clock) idem.Store {
			return OpenLedger(t, pool, pgledger.WithRunOptions(idem.WithClock(clk)))
		},
		LeaseExpiry: true,
		Items:       true,
		Shift:       KitShift,
	}
}

// DBHarness is Harness on a *sql.DB of driver: each store gets a *sql.DB
// of its own (sequences that run in parallel cannot then hold all of one's
// connections while waiting for one more).
func DBHarness(t *testing.T, driver string) idemtest.Harness {
	h := Harness(nil)
	h.Open = func(t *testing.T, clk idem.Clock) idem.Store {
		return OpenDBLedger(t, OpenDB(t, driver), pgledger.WithRunOptions(idem.WithClock(clk)))
	}
	return h
}

// TxLedger is a ledger whose transactions are T (pgx.Tx or *sql.Tx).
type TxLedger[T any] interface {
	SchemaLedger
	RunTx(ctx context.Context, key idem.Key, fn func(ctx context.Context, tx T) error, opts ...idem.Option) error
	idemstore.CatchUpTxStore[T]
}

// ModelTxFor is idemtest.TestModel's TxHarness for ledgers of type L,
// whose transactions are T: its RunTx and CatchUpTx jobs write, through
// exec (which runs a business statement in a T), to the table
// model_effects of the ledger's schema.
func ModelTxFor[L TxLedger[T], T any](exec func(ctx context.Context, tx T, q string, args ...any) error) *idemtest.TxHarness {
	// write is the model's business write for key: one more in its row.
	write := func(ctx context.Context, l L, tx T, key idem.Key) error {
		return exec(ctx, tx, `INSERT INTO `+Table(l, "model_effects")+` AS e (job, period, n) VALUES ($1, $2, 1)
		ON CONFLICT (job, period) DO UPDATE SET n = e.n + 1`, key.Job, key.Period)
	}
	return &idemtest.TxHarness{
		Setup: func(ctx context.Context, s idem.Store) error {
			return ExecIn(ctx, s.(L), `CREATE TABLE `+Table(s.(L), "model_effects")+
				` (job text NOT NULL, period text NOT NULL, n int NOT NULL, PRIMARY KEY (job, period))`)
		},
		Run: func(ctx context.Context, s idem.Store, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
			l := s.(L)
			return l.RunTx(ctx, key, func(ctx context.Context, tx T) error {
				if err := write(ctx, l, tx, key); err != nil {
					return err
				}
				return fn(ctx)
			}, opts...)
		},
		CatchUp: func(ctx context.Context, s idem.Store, job string, sched idem.Schedule, fn func(context.Context, idem.Period) error, opts ...idem.Option) (idem.CatchUpResult, error) {
			l := s.(L)
			return idem.CatchUpTx(ctx, l, job, sched, func(ctx context.Context, tx T, p idem.Period) error {
				if err := write(ctx, l, tx, idem.Key{Job: job, Period: p.Name}); err != nil {
					return err
				}
				return fn(ctx, p)
			}, opts...)
		},
		Rows: func(ctx context.Context, s idem.Store) (map[idem.Key]int, error) {
			out := map[idem.Key]int{}
			var k idem.Key
			var n int
			err := QueryIn(ctx, s.(L), `SELECT job, period, n FROM `+Table(s.(L), "model_effects"), []any{&k.Job, &k.Period, &n}, func() {
				out[k] = n
			})
			return out, err
		},
	}
}
