package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// pgFanoutClients is how many clients (hosts, as far as the database can
// tell: a pool of their own each) share a period's items in the pg_fanout
// comparisons.
const pgFanoutClients = 4

// extraPool opens one more pool for role on e's database, closed with e.
func (e *pgEnv) extraPool(ctx context.Context, role string) (*pgxpool.Pool, error) {
	p, err := pgPool(ctx, e.dsn, role, 0, nil)
	if err != nil {
		return nil, err
	}
	e.extraPools = append(e.extraPools, p)
	return p, nil
}

// pgFanoutLedgers opens pgFanoutClients-1 more ledgers on e's schema, each
// on a pool of its own, and returns them with e's.
func pgFanoutLedgers(ctx context.Context, e *pgEnv) ([]*pgledger.Ledger, error) {
	ls := []*pgledger.Ledger{e.ledger}
	for len(ls) < pgFanoutClients {
		p, err := e.extraPool(ctx, "idem")
		if err != nil {
			return nil, err
		}
		l, err := pgledger.New(ctx, p, pgledger.WithSchema(e.ledger.Schema()))
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// pgLedgerFanoutSide runs idem.Each over n no-op items of a new period each
// round from every ledger at once, one worker each (WithWorkers(1)), with
// windows of 500 (WithBatch): the clients share the period's chunks (each
// client records the item set; the first to record an item makes its
// chunk), claim them with SKIP LOCKED, and all return once every item is
// done.
func pgLedgerFanoutSide(ls []*pgledger.Ledger, n int) side {
	ids := fanoutItemIDs(n)
	return side{ops: func(ctx context.Context, round int) (int, error) {
		key := idem.Key{Job: "fanout", Period: fmt.Sprintf("%03d", round)}
		errs := make([]error, len(ls))
		var wg sync.WaitGroup
		for i, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := idem.Each(ctx, l, key, idem.Items(func(yield func(string) bool) {
					for _, id := range ids {
						if !yield(id) {
							return
						}
					}
				}), func(context.Context, string) error { return nil }, idem.WithBatch(fanoutBatch), idem.WithWorkers(1))
				if err == nil && res.Counts.Done != int64(n) {
					err = fmt.Errorf("each: %d items done, want %d", res.Counts.Done, n)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		return n, nil
	}}
}

// The floor's fan-out table: a period's chunks of up to 500 item ids, each
// claimed and marked done as a whole.
const pgFanChunksTable = `CREATE TABLE {s}.fan_chunks (
	job         text COLLATE "C" NOT NULL,
	period      text COLLATE "C" NOT NULL,
	chunk       integer NOT NULL,
	items       text[] NOT NULL,
	status      text NOT NULL DEFAULT 'pending',
	attempt     integer NOT NULL DEFAULT 0,
	owner       text NOT NULL DEFAULT '',
	lease_until timestamptz,
	PRIMARY KEY (job, period, chunk)
);
CREATE INDEX ON {s}.fan_chunks (job, period, status, chunk)`

const (
	// pgFanInsertSQL writes a period's chunks in one statement: $3 is the
	// item ids, cut into chunks of $4.
	pgFanInsertSQL = `INSERT INTO {s}.fan_chunks (job, period, chunk, items)
	SELECT $1, $2, c, ($3::text[])[(c - 1) * $4 + 1 : c * $4]
	FROM generate_series(1, (cardinality($3::text[]) + $4 - 1) / $4) AS c`

	// pgFanClaimSQL takes the first pending chunk, passing over those another
	// client is taking.
	pgFanClaimSQL = `UPDATE {s}.fan_chunks AS c SET status = 'running', attempt = c.attempt + 1, owner = $3,
		lease_until = clock_timestamp() + interval '1 minute'
	WHERE c.ctid = (SELECT ctid FROM {s}.fan_chunks
		WHERE job = $1 AND period = $2 AND status = 'pending'
		ORDER BY chunk LIMIT 1 FOR UPDATE SKIP LOCKED)
	RETURNING c.chunk, c.attempt, c.items`

	// pgFanDoneSQL marks a chunk's items done, fenced by the attempt.
	pgFanDoneSQL = `UPDATE {s}.fan_chunks SET status = 'done', lease_until = NULL
	WHERE job = $1 AND period = $2 AND chunk = $3 AND attempt = $4 AND status = 'running'`
)

// pgFanoutVsFloor: Each over n no-op items from 4 clients at once against
// the same chunks claimed by hand from 4 clients at once: per round, one
// INSERT of the period's chunks (500 item ids each, one statement), then
// each client in a loop, until no chunk is left:
//
//	batch (one round trip; its commit not waited for, like idem's chunk claims):
//	  SELECT set_config('synchronous_commit', 'off', true)
//	  UPDATE fan_chunks SET status = 'running', ... WHERE ctid = (SELECT ... status = 'pending'
//	    ORDER BY chunk LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING chunk, attempt, items
//	fn for each item
//	UPDATE fan_chunks SET status = 'done' WHERE ... AND attempt = $4 AND status = 'running'   -- synced
func pgFanoutVsFloor(ctx context.Context, cfg config) (result, error) {
	n := cfg.n * fanoutItems
	e, why, err := openPGWith(ctx, cfg, pgOptions{floor: true})
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	ls, err := pgFanoutLedgers(ctx, e)
	if err != nil {
		return result{}, err
	}
	r := strings.NewReplacer("{s}", e.floor)
	if _, err := e.pool.Exec(ctx, r.Replace(pgFanChunksTable)); err != nil {
		return result{}, err
	}
	insert, claim, done := r.Replace(pgFanInsertSQL), r.Replace(pgFanClaimSQL), r.Replace(pgFanDoneSQL)
	pools := []*pgxpool.Pool{e.pool}
	for len(pools) < pgFanoutClients {
		p, err := e.extraPool(ctx, "floor")
		if err != nil {
			return result{}, err
		}
		pools = append(pools, p)
	}
	ids := fanoutItemIDs(n)
	fn := func(context.Context, string) error { return nil }
	worker := func(ctx context.Context, p *pgxpool.Pool, period string) (int, error) {
		applied := 0
		for {
			b := &pgx.Batch{}
			b.Queue(pgSyncOffSQL)
			b.Queue(claim, "fanout", period, floorOwner)
			br := p.SendBatch(ctx, b)
			_, err := br.Exec()
			var chunk, attempt int32
			var items []string
			found := true
			if err == nil {
				err = br.QueryRow().Scan(&chunk, &attempt, &items)
				if errors.Is(err, pgx.ErrNoRows) {
					found, err = false, nil
				}
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil || !found {
				return applied, err
			}
			for _, it := range items {
				if err := fn(ctx, it); err != nil {
					return applied, err
				}
			}
			tag, err := p.Exec(ctx, done, "fanout", period, chunk, attempt)
			if err != nil {
				return applied, err
			}
			if tag.RowsAffected() != 1 {
				return applied, fmt.Errorf("floor: chunk %d: done mark changed %d rows", chunk, tag.RowsAffected())
			}
			applied += len(items)
		}
	}
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		period := fmt.Sprintf("%03d", round)
		if _, err := e.pool.Exec(ctx, insert, "fanout", period, ids, fanoutBatch); err != nil {
			return 0, err
		}
		applied := make([]int, len(pools))
		errs := make([]error, len(pools))
		var wg sync.WaitGroup
		for i, p := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				applied[i], errs[i] = worker(ctx, p, period)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		total := 0
		for _, a := range applied {
			total += a
		}
		if total != n {
			return 0, fmt.Errorf("floor: %d items applied, want %d", total, n)
		}
		return n, nil
	}}
	return alternate(ctx, cfg, pgLedgerFanoutSide(ls, n), floorSide)
}

// pgFanoutVsRiver: Each over n no-op items from 4 clients at once against
// River on Postgres with 4 clients (a pool of their own each, on one
// schema): the same items inserted by one of them with InsertMany in
// batches of 500 (unique by arguments), worked by all four, and waited for
// until every one completed.
func pgFanoutVsRiver(ctx context.Context, cfg config) (result, error) {
	n := cfg.n * fanoutItems / 10 // River is slower: fewer items keep the pass short
	e, why, err := openPGWith(ctx, cfg, pgOptions{})
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	ls, err := pgFanoutLedgers(ctx, e)
	if err != nil {
		return result{}, err
	}
	riverSchema := randomName("river_bench_")
	if _, err := e.idemPool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{riverSchema}.Sanitize()); err != nil {
		return result{}, err
	}
	defer e.idemPool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA IF EXISTS `+pgx.Identifier{riverSchema}.Sanitize()+` CASCADE`)
	done := make(chan *river.Event, n+1000)
	var clients []*riverEnv[pgx.Tx]
	defer func() {
		for _, c := range clients {
			c.stop(ctx)
		}
	}()
	fwd, stopFwd := context.WithCancel(ctx)
	defer stopFwd()
	for range pgFanoutClients {
		p, err := e.extraPool(ctx, "river")
		if err != nil {
			return result{}, err
		}
		env, err := startRiver(ctx, riverpgxv5.New(p), riverSchema, n, func(w *river.Workers) { river.AddWorker(w, &itemWorker{}) })
		if err != nil {
			return result{}, err
		}
		clients = append(clients, env)
		go func() { // the four clients' completions, into one channel
			for {
				select {
				case ev, ok := <-env.done:
					if !ok {
						return
					}
					select {
					case done <- ev:
					case <-fwd.Done():
						return
					}
				case <-fwd.Done():
					return
				}
			}
		}()
	}
	ids := fanoutItemIDs(n)
	riverSide := side{ops: func(ctx context.Context, round int) (int, error) {
		return n, riverInsertItems(ctx, clients[0].client, done, fmt.Sprintf("%03d", round), ids)
	}}
	return alternate(ctx, cfg, pgLedgerFanoutSide(ls, n), riverSide)
}
