package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
)

// runTxVsFloor: Ledger.RunTx of new keys with one business upsert against
// the same upsert and the key's done mark in one raw transaction:
//
//	(connection at synchronous=FULL: the commit is synced)
//	BEGIN IMMEDIATE
//	INSERT INTO idem_runs(job, period, status, attempt, owner, created, updated)
//	  VALUES(?, ?, 'done', 1, ?, ?, ?) ON CONFLICT DO NOTHING     -- must insert 1 row
//	INSERT INTO daily_settle ... ON CONFLICT(biz_date) DO UPDATE ...  -- the upsert
//	COMMIT
//
// all prepared once. On the idem side fn runs the same upsert through a
// statement prepared once on the ledger's database (tx.StmtContext).
func runTxVsFloor(ctx context.Context, cfg config) (result, error) {
	dir, l, cleanup, err := ledgerInTempDir(ctx, "runtx")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	if _, err := l.DB().ExecContext(ctx, runsTable); err != nil { // creates daily_settle beside the ledger
		return result{}, err
	}
	upsert, err := l.DB().PrepareContext(ctx, settleUpsert)
	if err != nil {
		return result{}, err
	}
	defer upsert.Close()
	idemSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, cfg.n)
		for i, k := range keys {
			err := l.RunTx(ctx, k, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.StmtContext(ctx, upsert).ExecContext(ctx, k.Period, int64(i))
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}

	fl, err := openFloor(ctx, filepath.Join(dir, "floor.db"))
	if err != nil {
		return result{}, err
	}
	defer fl.close()
	c, err := fl.conn(ctx, "FULL")
	if err != nil {
		return result{}, err
	}
	var begin, mark, biz, commit *sql.Stmt
	for _, p := range []struct {
		s **sql.Stmt
		q string
	}{
		{&begin, `BEGIN IMMEDIATE`},
		{&mark, `INSERT INTO idem_runs(job, period, status, attempt, owner, created, updated)
			VALUES(?, ?, 'done', 1, ?, ?, ?) ON CONFLICT DO NOTHING`},
		{&biz, settleUpsert},
		{&commit, `COMMIT`},
	} {
		if *p.s, err = fl.prepare(ctx, c, p.q); err != nil {
			return result{}, err
		}
	}
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, cfg.n)
		for i, k := range keys {
			if _, err := begin.ExecContext(ctx); err != nil {
				return 0, err
			}
			now := nowMicros()
			err := execOne(ctx, mark, k.Job, k.Period, floorOwner, now, now)
			if err == nil {
				_, err = biz.ExecContext(ctx, k.Period, int64(i))
			}
			if err == nil {
				_, err = commit.ExecContext(ctx)
			}
			if err != nil {
				c.ExecContext(ctx, `ROLLBACK`)
				return 0, fmt.Errorf("%s: %w", k, err)
			}
		}
		return len(keys), nil
	}}
	return alternate(ctx, cfg, idemSide, floorSide)
}
