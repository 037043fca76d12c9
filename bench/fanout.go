package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/riverqueue/river"
)

// fanoutItems is how many items one fan-out measurement applies, per
// cfg.n keys of the other comparisons.
const fanoutItems = 50

// fanoutBatch is the batch both fan-out sides commit: idem's WithBatch, the
// floor's rows per INSERT, River's jobs per InsertMany.
const fanoutBatch = 500

func fanoutItemIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%07d", i)
	}
	return ids
}

// ledgerFanoutSide runs idem.Each over n no-op items of a new period each
// round: the item set is recorded (batched INSERT ... ON CONFLICT DO
// NOTHING, a chunk per 500 new items), each chunk is claimed and its items
// marked done in windows of 500 (one UPDATE of the chunk's row each), then
// the period is marked done.
func ledgerFanoutSide(l *idem.Ledger, n int) side {
	ids := fanoutItemIDs(n)
	return side{ops: func(ctx context.Context, round int) (int, error) {
		key := idem.Key{Job: "fanout", Period: fmt.Sprintf("%03d", round)}
		res, err := idem.Each(ctx, l, key, idem.Items(func(yield func(string) bool) {
			for _, id := range ids {
				if !yield(id) {
					return
				}
			}
		}), func(context.Context, string) error { return nil }, idem.WithBatch(fanoutBatch))
		if err != nil {
			return 0, err
		}
		if res.Counts.Done != int64(n) {
			return 0, fmt.Errorf("each: %d items done, want %d", res.Counts.Done, n)
		}
		return n, nil
	}}
}

// fanoutVsFloor: Each over n no-op items against raw batched inserts of the
// same done marks: per batch of 500,
//
//	(connection at synchronous=FULL: each commit is synced)
//	BEGIN IMMEDIATE
//	INSERT INTO idem_items(job, period, item, status) VALUES (...), ... ON CONFLICT DO NOTHING
//	COMMIT
//
// The floor writes each mark once; idem inserts each item into the item set
// once and, per chunk of 500, writes the chunk, its item list, its claim and
// its done mark.
func fanoutVsFloor(ctx context.Context, cfg config) (result, error) {
	n := cfg.n * fanoutItems
	dir, l, cleanup, err := ledgerInTempDir(ctx, "fanout")
	if err != nil {
		return result{}, err
	}
	defer cleanup()

	fl, err := openFloor(ctx, filepath.Join(dir, "floor.db"))
	if err != nil {
		return result{}, err
	}
	defer fl.close()
	if _, err := fl.db.ExecContext(ctx, `CREATE TABLE idem_items(job TEXT NOT NULL, period TEXT NOT NULL, item TEXT NOT NULL,
		status TEXT NOT NULL, PRIMARY KEY (job, period, item)) WITHOUT ROWID`); err != nil {
		return result{}, err
	}
	c, err := fl.conn(ctx, "FULL")
	if err != nil {
		return result{}, err
	}
	var q strings.Builder
	q.WriteString(`INSERT INTO idem_items(job, period, item, status) VALUES `)
	for i := range fanoutBatch {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?,?,?,'done')")
	}
	q.WriteString(` ON CONFLICT DO NOTHING`)
	insert, err := fl.prepare(ctx, c, q.String())
	if err != nil {
		return result{}, err
	}
	ids := fanoutItemIDs(n)
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		period := fmt.Sprintf("%03d", round)
		args := make([]any, 0, 3*fanoutBatch)
		for start := 0; start < n; start += fanoutBatch {
			args = args[:0]
			for i := start; i < start+fanoutBatch; i++ {
				id := ids[min(i, n-1)] // a short last batch repeats its last id (ON CONFLICT DO NOTHING)
				args = append(args, "fanout", period, id)
			}
			if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
				return 0, err
			}
			if _, err := insert.ExecContext(ctx, args...); err != nil {
				c.ExecContext(ctx, `ROLLBACK`)
				return 0, err
			}
			if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
				return 0, err
			}
		}
		return n, nil
	}}
	return alternate(ctx, cfg, ledgerFanoutSide(l, n), floorSide)
}

// itemArgs is River's job for one item of a period, unique by its
// arguments as idem's items are.
type itemArgs struct {
	Period string `json:"period"`
	Item   string `json:"item"`
}

func (itemArgs) Kind() string { return "idem_bench_item" }

func (itemArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type itemWorker struct {
	river.WorkerDefaults[itemArgs]
}

func (*itemWorker) Work(context.Context, *river.Job[itemArgs]) error { return nil }

// fanoutVsRiver: Each over n no-op items against River on SQLite: the same
// items inserted with InsertMany in batches of 500 (unique by arguments),
// worked, and waited for until every one completed.
func fanoutVsRiver(ctx context.Context, cfg config) (result, error) {
	n := cfg.n * fanoutItems / 10 // River is slower: fewer items keep the pass short
	dir, l, cleanup, err := ledgerInTempDir(ctx, "fanout-river")
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	env, stop, err := openRiverSQLite(ctx, dir, n, func(w *river.Workers) { river.AddWorker(w, &itemWorker{}) })
	if err != nil {
		return result{}, err
	}
	defer stop()
	ids := fanoutItemIDs(n)
	riverSide := side{ops: func(ctx context.Context, round int) (int, error) {
		return n, riverInsertItems(ctx, env.client, env.done, fmt.Sprintf("%03d", round), ids)
	}}
	return alternate(ctx, cfg, ledgerFanoutSide(l, n), riverSide)
}

// riverInsertItems inserts one job per item of period with InsertMany in
// batches of 500 (unique by arguments) and returns once done has delivered
// the completion of every one.
func riverInsertItems[TTx any](ctx context.Context, client *river.Client[TTx], done <-chan *river.Event, period string, ids []string) error {
	for start := 0; start < len(ids); start += fanoutBatch {
		var params []river.InsertManyParams
		for _, id := range ids[start:min(start+fanoutBatch, len(ids))] {
			params = append(params, river.InsertManyParams{Args: itemArgs{Period: period, Item: id}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return err
		}
	}
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
	for range ids {
		select {
		case ev, ok := <-done:
			if !ok {
				return errors.New("river: subscription closed")
			}
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("river: event %s", ev.Kind)
			}
		case <-timeout.C:
			return errors.New("river: items not worked within two minutes")
		}
	}
	return nil
}
