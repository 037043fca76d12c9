package idemtest

// TxHarness and SQLTx: how TestModel exercises idem.RunTx and
// idem.CatchUpTx on a store whose records share a database with business
// data.

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// TxHarness lets [TestModel] exercise idem.RunTx on a store whose
// records share a database with business data: the business write of each
// attempt must commit with the done mark, or not at all (exactly once).
type TxHarness struct {
	// Setup prepares a new store for Run and Rows (creates the business
	// table). It may be nil.
	Setup func(ctx context.Context, s idem.Store) error
	// Run calls idem.RunTx (or the store's RunTx) on s for key with
	// opts, with a fn that first makes one business write for key in the
	// transaction, then returns what fn(ctx) returns. ctx must be passed on
	// as it is given to the transaction's fn (it carries idem.Info).
	Run func(ctx context.Context, s idem.Store, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error
	// Rows returns the committed business writes, counted by key.
	Rows func(ctx context.Context, s idem.Store) (map[idem.Key]int, error)
	// CatchUp, if set, calls idem.CatchUpTx on s with the same business
	// write for each period's key (job, p.Name), then fn(ctx, p); TestModel
	// then also catches up a RunTx job.
	CatchUp func(ctx context.Context, s idem.Store, job string, sched idem.Schedule, fn func(context.Context, idem.Period) error, opts ...idem.Option) (idem.CatchUpResult, error)
}

// SQLTx is the [TxHarness] of a store whose transactions are *sql.Tx and
// that gives its database with a method DB() *sql.DB, as [idem.Ledger]
// does: the business writes go to a table idemtest_model_effects.
func SQLTx() *TxHarness {
	db := func(s idem.Store) (*sql.DB, error) {
		d, ok := s.(interface{ DB() *sql.DB })
		if !ok {
			return nil, fmt.Errorf("idemtest: SQLTx: %T has no method DB() *sql.DB", s)
		}
		return d.DB(), nil
	}
	write := func(ctx context.Context, tx *sql.Tx, key idem.Key) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO idemtest_model_effects(job, period, n) VALUES (?, ?, 1)
			ON CONFLICT (job, period) DO UPDATE SET n = n + 1`, key.Job, key.Period)
		return err
	}
	return &TxHarness{
		Setup: func(ctx context.Context, s idem.Store) error {
			d, err := db(s)
			if err != nil {
				return err
			}
			_, err = d.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS idemtest_model_effects (
				job TEXT NOT NULL, period TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (job, period))`)
			return err
		},
		Run: func(ctx context.Context, s idem.Store, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
			ts, ok := s.(idemstore.TxStore[*sql.Tx])
			if !ok {
				return fmt.Errorf("idemtest: SQLTx: %T is not an idemstore.TxStore[*sql.Tx]", s)
			}
			return idem.RunTx(ctx, idem.TxStoreOf(ts), key, func(ctx context.Context, tx *sql.Tx) error {
				if err := write(ctx, tx, key); err != nil {
					return err
				}
				return fn(ctx)
			}, opts...)
		},
		CatchUp: func(ctx context.Context, s idem.Store, job string, sched idem.Schedule, fn func(context.Context, idem.Period) error, opts ...idem.Option) (idem.CatchUpResult, error) {
			cs, ok := s.(idemstore.CatchUpTxStore[*sql.Tx])
			if !ok {
				return idem.CatchUpResult{}, fmt.Errorf("idemtest: SQLTx: %T is not an idemstore.CatchUpTxStore[*sql.Tx]", s)
			}
			return idem.CatchUpTx(ctx, idem.TxStoreOf[*sql.Tx](cs), job, sched, func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
				if err := write(ctx, tx, idem.Key{Job: job, Period: p.Name}); err != nil {
					return err
				}
				return fn(ctx, p)
			}, opts...)
		},
		Rows: func(ctx context.Context, s idem.Store) (map[idem.Key]int, error) {
			d, err := db(s)
			if err != nil {
				return nil, err
			}
			rows, err := d.QueryContext(ctx, `SELECT job, period, n FROM idemtest_model_effects`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			out := map[idem.Key]int{}
			for rows.Next() {
				var k idem.Key
				var n int
				if err := rows.Scan(&k.Job, &k.Period, &n); err != nil {
					return nil, err
				}
				out[k] = n
			}
			return out, rows.Err()
		},
	}
}
