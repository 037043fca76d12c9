package pgledger_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
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
	return &idemtest.TxHarness{
		Setup: func(ctx context.Context, s idem.Store) error {
			l := s.(*pgledger.Ledger)
			_, err := l.Pool().Exec(ctx, `CREATE TABLE `+table(l, "model_effects")+
				` (job text NOT NULL, period text NOT NULL, n int NOT NULL, PRIMARY KEY (job, period))`)
			return err
		},
		Run: func(ctx context.Context, s idem.Store, key idem.Key, fn func(context.Context) error, opts ...idem.RunTxOption) error {
			l := s.(*pgledger.Ledger)
			return l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
				if err := modelWrite(ctx, l, tx, key); err != nil {
					return err
				}
				return fn(ctx)
			}, opts...)
		},
		CatchUp: func(ctx context.Context, s idem.Store, job string, sched idem.Schedule, fn func(context.Context, idem.Period) error, opts ...idem.CatchUpTxOption) (idem.CatchUpResult, error) {
			l := s.(*pgledger.Ledger)
			return l.CatchUpTx(ctx, job, sched, func(ctx context.Context, tx pgx.Tx, p idem.Period) error {
				if err := modelWrite(ctx, l, tx, idem.Key{Job: job, Period: p.Name}); err != nil {
					return err
				}
				return fn(ctx, p)
			}, opts...)
		},
		Rows: func(ctx context.Context, s idem.Store) (map[idem.Key]int, error) {
			l := s.(*pgledger.Ledger)
			rows, err := l.Pool().Query(ctx, `SELECT job, period, n FROM `+table(l, "model_effects"))
			if err != nil {
				return nil, err
			}
			out := map[idem.Key]int{}
			var k idem.Key
			var n int
			_, err = pgx.ForEachRow(rows, []any{&k.Job, &k.Period, &n}, func() error {
				out[k] = n
				return nil
			})
			return out, err
		},
	}
}

// modelWrite is the model's business write for key: one more in its row.
func modelWrite(ctx context.Context, l *pgledger.Ledger, tx pgx.Tx, key idem.Key) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+table(l, "model_effects")+` AS e (job, period, n) VALUES ($1, $2, 1)
		ON CONFLICT (job, period) DO UPDATE SET n = e.n + 1`, key.Job, key.Period)
	return err
}
