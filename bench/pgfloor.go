package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The Postgres floor: hand-written SQL on tables of the ledger's own shape
// (made by pgledger in a schema of the floor's), through a pgx pool of its
// own with pgx's default statement cache (each statement prepared once per
// connection), as the ledger's pool has.

// pgFloorClaim is the floor's claim of a new key: the ledger's own INSERT
// (with its horizon check), in a batch after set_config of
// synchronous_commit for the batch's implicit transaction: like the
// ledger's AtLeastOnce claim, its commit is not waited for (the done mark's
// synchronous commit flushes the WAL through it). One round trip.
const pgFloorClaimSQL = `INSERT INTO {s}.runs(job, period, status, attempt, owner, lease_until, created, updated)
	SELECT $1, $2, 'running', 1, $3, clock_timestamp() + interval '1 minute', clock_timestamp(), clock_timestamp()
	WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE job = $1 AND horizon >= $2 COLLATE "C")
	ON CONFLICT (job, period) DO NOTHING`

// pgFloorDoneSQL is the floor's done mark, fenced by the attempt: one
// round trip, a synchronous commit (one WAL flush).
const pgFloorDoneSQL = `UPDATE {s}.runs SET status = 'done', lease_until = NULL, updated = clock_timestamp()
	WHERE job = $1 AND period = $2 AND attempt = 1 AND status = 'running'`

const pgSyncOffSQL = `SELECT set_config('synchronous_commit', 'off', true)`

// pgFloor runs the floor's statements on its pool.
type pgFloor struct {
	pool                *pgxpool.Pool
	claim, done, status string
}

func newPGFloor(e *pgEnv) *pgFloor {
	r := strings.NewReplacer("{s}", e.floor)
	return &pgFloor{
		pool:   e.pool,
		claim:  r.Replace(pgFloorClaimSQL),
		done:   r.Replace(pgFloorDoneSQL),
		status: r.Replace(`SELECT status FROM {s}.runs WHERE job = $1 AND period = $2`),
	}
}

// run is the floor's Run of a new key: claim (one batch), fn, done mark.
func (f *pgFloor) run(ctx context.Context, k idem.Key, fn func(context.Context) error) error {
	b := &pgx.Batch{}
	b.Queue(pgSyncOffSQL)
	b.Queue(f.claim, k.Job, k.Period, floorOwner)
	br := f.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("floor: claim of %s inserted %d rows", k, tag.RowsAffected())
	}
	if err := fn(ctx); err != nil {
		return err
	}
	tag, err = f.pool.Exec(ctx, f.done, k.Job, k.Period)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("floor: done mark of %s changed %d rows", k, tag.RowsAffected())
	}
	return nil
}

// pgFreshRunVsFloor: pgledger's Run (AtLeastOnce) of new keys against the
// floor's claim and done mark:
//
//	batch (one round trip, one implicit transaction, commit not waited for):
//	  SELECT set_config('synchronous_commit', 'off', true)
//	  INSERT INTO runs(...) SELECT ... WHERE NOT EXISTS (horizon) ON CONFLICT DO NOTHING   -- 1 row
//	UPDATE runs SET status = 'done', ... WHERE job, period, attempt = 1, status = 'running'  -- 1 row, synced
func pgFreshRunVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openPGWith(ctx, cfg, pgOptions{floor: true})
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	f := newPGFloor(e)
	return alternate(ctx, cfg, ledgerFreshSide(e.ledger, cfg.n), side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, cfg.n)
		for _, k := range keys {
			if err := f.run(ctx, k, noop); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}})
}

// pgDuplicateVsFloor: pgledger's Run of keys already done against one
// primary-key read of the status:
//
//	SELECT status FROM runs WHERE job = $1 AND period = $2   -- must say 'done'
func pgDuplicateVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openPGWith(ctx, cfg, pgOptions{floor: true})
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	f := newPGFloor(e)
	keys := roundKeys("dup", 0, cfg.n)
	for _, k := range keys { // setup: the floor's keys, done
		if err := f.run(ctx, k, noop); err != nil {
			return result{}, err
		}
	}
	idemSide, err := ledgerDuplicateSide(ctx, e.ledger, keys)
	if err != nil {
		return result{}, err
	}
	return alternate(ctx, cfg, idemSide, side{ops: func(ctx context.Context, round int) (int, error) {
		var status string
		for range dupPasses {
			for _, k := range keys {
				if err := f.pool.QueryRow(ctx, f.status, k.Job, k.Period).Scan(&status); err != nil {
					return 0, err
				}
				if status != "done" {
					return 0, fmt.Errorf("%s is %s", k, status)
				}
			}
		}
		return dupPasses * len(keys), nil
	}})
}

// pgSettleUpsert is the business write of pg_runtx_vs_floor, the same on
// both sides (each in a table of its own schema).
const pgSettleUpsert = `INSERT INTO {s}.daily_settle(biz_date, amount_cent) VALUES ($1, $2)
	ON CONFLICT (biz_date) DO UPDATE SET amount_cent = excluded.amount_cent
	WHERE daily_settle.amount_cent <> excluded.amount_cent`

const pgSettleTable = `CREATE TABLE {s}.daily_settle (biz_date text PRIMARY KEY, amount_cent bigint NOT NULL)`

// pgRunTxVsFloor: pgledger's RunTx of new keys with one business upsert
// against the same upsert and the key's done mark in one transaction by
// hand, through a pgx.Tx as RunTx's fn gets one:
//
//	BEGIN
//	INSERT INTO runs(...) VALUES (..., 'done', ...) ON CONFLICT DO NOTHING   -- 1 row
//	INSERT INTO daily_settle ... ON CONFLICT (biz_date) DO UPDATE ...        -- the upsert
//	COMMIT                                                                   -- synced
//
// four round trips, one WAL flush.
func pgRunTxVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openPGWith(ctx, cfg, pgOptions{floor: true})
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	idemS := pgx.Identifier{e.ledger.Schema()}.Sanitize()
	for _, s := range []string{idemS, e.floor} {
		if _, err := e.pool.Exec(ctx, strings.ReplaceAll(pgSettleTable, "{s}", s)); err != nil {
			return result{}, err
		}
	}
	idemUpsert := strings.ReplaceAll(pgSettleUpsert, "{s}", idemS)
	idemSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, cfg.n)
		for i, k := range keys {
			err := e.ledger.RunTx(ctx, k, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, idemUpsert, k.Period, int64(i))
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	floorUpsert := strings.ReplaceAll(pgSettleUpsert, "{s}", e.floor)
	mark := strings.ReplaceAll(`INSERT INTO {s}.runs(job, period, status, attempt, owner, created, updated)
		VALUES ($1, $2, 'done', 1, $3, clock_timestamp(), clock_timestamp()) ON CONFLICT DO NOTHING`, "{s}", e.floor)
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, cfg.n)
		for i, k := range keys {
			err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, mark, k.Job, k.Period, floorOwner)
				if err != nil {
					return err
				}
				if tag.RowsAffected() != 1 {
					return fmt.Errorf("floor: %s inserted %d rows", k, tag.RowsAffected())
				}
				_, err = tx.Exec(ctx, floorUpsert, k.Period, int64(i))
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	return alternate(ctx, cfg, idemSide, floorSide)
}
