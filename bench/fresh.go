package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
)

// freshRunVsFloor: Ledger.Run (AtLeastOnce) of new keys against the same
// durable claim and done mark in hand-written SQL.
//
// The floor, per key, on the same file settings as the ledger:
//
//	claim (connection at synchronous=NORMAL, like idem's AtLeastOnce claim:
//	its commit is not synced):
//	  BEGIN IMMEDIATE
//	  INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated)
//	    SELECT ?, ?, 'running', 1, ?, ?, ?, ?
//	    WHERE NOT EXISTS (SELECT 1 FROM idem_jobs WHERE job = ? AND horizon >= ?)
//	    ON CONFLICT DO NOTHING                                           -- must insert 1 row
//	  COMMIT
//	done (connection at synchronous=FULL: the commit is synced):
//	  UPDATE idem_runs SET status='done', lease_until=0, updated=?
//	    WHERE job=? AND period=? AND attempt=1 AND status='running'      -- must change 1 row
//
// all four statements prepared once. The claim is idem's own INSERT, which
// also checks the job's retention horizon (one primary-key probe of
// idem_jobs).
func freshRunVsFloor(ctx context.Context, cfg config) (result, error) {
	dir, l, cleanup, err := ledgerInTempDir(ctx, "fresh")
	if err != nil {
		return result{}, err
	}
	defer cleanup()

	fl, err := newFreshFloor(ctx, filepath.Join(dir, "floor.db"))
	if err != nil {
		return result{}, err
	}
	defer fl.close()
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, cfg.n)
		for _, k := range keys {
			if err := fl.run(ctx, k, noop); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	return alternate(ctx, cfg, ledgerFreshSide(l, cfg.n), floorSide)
}

type freshFloor struct {
	*floorDB
	begin, insert, commit, done *sql.Stmt
}

func newFreshFloor(ctx context.Context, path string) (*freshFloor, error) {
	f, err := openFloor(ctx, path)
	if err != nil {
		return nil, err
	}
	ff := &freshFloor{floorDB: f}
	if err := ff.init(ctx); err != nil {
		f.close()
		return nil, err
	}
	return ff, nil
}

func (f *freshFloor) init(ctx context.Context) error {
	claim, err := f.conn(ctx, "NORMAL")
	if err != nil {
		return err
	}
	durable, err := f.conn(ctx, "FULL")
	if err != nil {
		return err
	}
	for _, p := range []struct {
		s **sql.Stmt
		c *sql.Conn
		q string
	}{
		{&f.begin, claim, `BEGIN IMMEDIATE`},
		{&f.insert, claim, `INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated)
			SELECT ?, ?, 'running', 1, ?, ?, ?, ?
			WHERE NOT EXISTS (SELECT 1 FROM idem_jobs WHERE job = ? AND horizon >= ?)
			ON CONFLICT DO NOTHING`},
		{&f.commit, claim, `COMMIT`},
		{&f.done, durable, `UPDATE idem_runs SET status='done', lease_until=0, updated=?
			WHERE job=? AND period=? AND attempt=1 AND status='running'`},
	} {
		s, err := f.prepare(ctx, p.c, p.q)
		if err != nil {
			return err
		}
		*p.s = s
	}
	return nil
}

// run is the floor's Run: durable claim, fn, durable done mark.
func (f *freshFloor) run(ctx context.Context, k idem.Key, fn func(context.Context) error) error {
	if err := f.claim(ctx, k); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		return err
	}
	return execOne(ctx, f.done, nowMicros(), k.Job, k.Period)
}

// claim is the floor's claim of k: BEGIN IMMEDIATE, INSERT, COMMIT.
func (f *freshFloor) claim(ctx context.Context, k idem.Key) error {
	now := nowMicros()
	if _, err := f.begin.ExecContext(ctx); err != nil {
		return err
	}
	if err := execOne(ctx, f.insert, k.Job, k.Period, floorOwner, now+int64(time.Minute/time.Microsecond), now, now, k.Job, k.Period); err != nil {
		f.rollback(ctx)
		return err
	}
	if _, err := f.commit.ExecContext(ctx); err != nil {
		f.rollback(ctx)
		return err
	}
	return nil
}

func (f *freshFloor) rollback(ctx context.Context) {
	f.conns[0].ExecContext(ctx, `ROLLBACK`)
}
