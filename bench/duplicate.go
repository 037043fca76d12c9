package main

import (
	"context"
	"fmt"
	"path/filepath"
)

// duplicateVsFloor: Ledger.Run of keys already done against one prepared
// primary-key read of a table of idem_runs' shape:
//
//	SELECT status FROM idem_runs WHERE job=? AND period=?   -- must say 'done'
func duplicateVsFloor(ctx context.Context, cfg config) (result, error) {
	dir, l, cleanup, err := ledgerInTempDir(ctx, "dup")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	keys := roundKeys("dup", 0, cfg.n)
	idemSide, err := ledgerDuplicateSide(ctx, l, keys)
	if err != nil {
		return result{}, err
	}

	fl, err := openFloor(ctx, filepath.Join(dir, "floor.db"))
	if err != nil {
		return result{}, err
	}
	defer fl.close()
	c, err := fl.conn(ctx, "FULL")
	if err != nil {
		return result{}, err
	}
	// Setup: the keys, done.
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return result{}, err
	}
	for _, k := range keys {
		now := nowMicros()
		if _, err := tx.ExecContext(ctx, `INSERT INTO idem_runs(job, period, status, attempt, owner, created, updated)
			VALUES(?, ?, 'done', 1, ?, ?, ?)`, k.Job, k.Period, floorOwner, now, now); err != nil {
			tx.Rollback()
			return result{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return result{}, err
	}
	read, err := fl.prepare(ctx, c, `SELECT status FROM idem_runs WHERE job=? AND period=?`)
	if err != nil {
		return result{}, err
	}
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		var status string
		for range dupPasses {
			for _, k := range keys {
				if err := read.QueryRowContext(ctx, k.Job, k.Period).Scan(&status); err != nil {
					return 0, err
				}
				if status != "done" {
					return 0, fmt.Errorf("%s is %s", k, status)
				}
			}
		}
		return dupPasses * len(keys), nil
	}}
	return alternate(ctx, cfg, idemSide, floorSide)
}
