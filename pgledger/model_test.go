package pgledger_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestModel compares the ledger with the reference model of
// idemtest.TestModel after every operation of random sequences, RunTx and
// CatchUpTx included. The database's clock moves with the model's through Shift, as
// in TestConformance. A long run: IDEM_MODEL_OPS=100000 (and
// IDEM_MODEL_SEED to reproduce a failure).
func TestModel(t *testing.T) {
	t.Parallel()
	h := harness(newPool(t))
	// The sequences run in parallel, each on a pool of its own: one pool's
	// few connections, shared, could all be held by sequences that each
	// wait for one more.
	h.Open = func(t *testing.T, clk idem.Clock) idem.Store {
		return openLedger(t, newPool(t), pgledger.WithRunOptions(idem.WithClock(clk)))
	}
	h.Tx = modelTx()
	idemtest.TestModel(t, h, idemtest.ModelOptions{Parallel: true})
}

// modelTx runs the model's RunTx and CatchUpTx jobs with their business
// writes in the ledger's schema, table model_effects.
func modelTx() *idemtest.TxHarness {
	return modelTxFor[*pgledger.Ledger](func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
		_, err := tx.Exec(ctx, q, args...)
		return err
	})
}

// txLedger is a ledger whose transactions are T (pgx.Tx or *sql.Tx).
type txLedger[T any] interface {
	schemaLedger
	RunTx(ctx context.Context, key idem.Key, fn func(ctx context.Context, tx T) error, opts ...idem.Option) error
	idemstore.CatchUpTxStore[T]
}

// modelTxFor is modelTx for ledgers of type L, whose transactions are T;
// exec runs a business statement in one.
func modelTxFor[L txLedger[T], T any](exec func(ctx context.Context, tx T, q string, args ...any) error) *idemtest.TxHarness {
	// write is the model's business write for key: one more in its row.
	write := func(ctx context.Context, l L, tx T, key idem.Key) error {
		return exec(ctx, tx, `INSERT INTO `+table(l, "model_effects")+` AS e (job, period, n) VALUES ($1, $2, 1)
		ON CONFLICT (job, period) DO UPDATE SET n = e.n + 1`, key.Job, key.Period)
	}
	return &idemtest.TxHarness{
		Setup: func(ctx context.Context, s idem.Store) error {
			return execIn(ctx, s.(L), `CREATE TABLE `+table(s.(L), "model_effects")+
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
			err := queryIn(ctx, s.(L), `SELECT job, period, n FROM `+table(s.(L), "model_effects"), []any{&k.Job, &k.Period, &n}, func() {
				out[k] = n
			})
			return out, err
		},
	}
}
