package main

import (
	"context"
	"database/sql"
	"path/filepath"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
)

// openRiverSQLite starts River on a SQLite file in dir with the settings of
// idem's ledger (WAL, busy_timeout, synchronous=FULL, IMMEDIATE
// transactions) and one connection, as riversqlite's documentation advises.
func openRiverSQLite(ctx context.Context, dir string, n int, extra ...func(*river.Workers)) (*riverEnv[*sql.Tx], func(), error) {
	db, err := openSQLite(filepath.Join(dir, "river.db"), "river")
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `PRAGMA journal_mode=WAL`); err != nil {
		db.Close()
		return nil, nil, err
	}
	env, err := startRiver(ctx, riversqlite.New(db), "", n, extra...)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	env.db = db
	return env, func() { env.stop(ctx); db.Close() }, nil
}

// freshRunVsRiver: Ledger.Run of new keys against River on SQLite: one
// unique job per key, inserted and worked.
func freshRunVsRiver(ctx context.Context, cfg config) (result, error) {
	dir, l, cleanup, err := ledgerInTempDir(ctx, "fresh-river")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	env, stop, err := openRiverSQLite(ctx, dir, cfg.n)
	if err != nil {
		return result{}, err
	}
	defer stop()
	return alternate(ctx, cfg, ledgerFreshSide(l, cfg.n), side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, cfg.n)
		return len(keys), env.insertAndWork(ctx, keys)
	}})
}

// duplicateVsRiver: Ledger.Run of keys already done against River's insert
// of a unique job that already exists (completed), which River skips.
func duplicateVsRiver(ctx context.Context, cfg config) (result, error) {
	dir, l, cleanup, err := ledgerInTempDir(ctx, "dup-river")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	env, stop, err := openRiverSQLite(ctx, dir, cfg.n)
	if err != nil {
		return result{}, err
	}
	defer stop()
	keys := roundKeys("dup", 0, cfg.n)
	if err := env.insertAndWork(ctx, keys); err != nil {
		return result{}, err
	}
	idemSide, err := ledgerDuplicateSide(ctx, l, keys)
	if err != nil {
		return result{}, err
	}
	return alternate(ctx, cfg, idemSide, side{ops: func(ctx context.Context, round int) (int, error) {
		return len(keys), env.insertDuplicates(ctx, keys)
	}})
}
