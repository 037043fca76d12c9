package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/riverqueue/river"
)

// The outbox comparisons: one operation is a business transaction that
// upserts a row and queues one message in the same commit, and that
// message's delivery (to a receiver that does nothing) marked as done.

// outboxTable is the floor's outbox: a sequence for the order, the
// message's stable id, its topic and payload, and when it was delivered
// (0: not yet).
const outboxTable = `
CREATE TABLE IF NOT EXISTS outbox (
	seq       INTEGER PRIMARY KEY AUTOINCREMENT,
	id        TEXT    NOT NULL UNIQUE,
	topic     TEXT    NOT NULL,
	payload   BLOB    NOT NULL,
	created   INTEGER NOT NULL,
	delivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(delivered, seq);`

// outboxPayload is the message of key: a settlement notice.
func outboxPayload(k idem.Key, amount int) []byte {
	return fmt.Appendf(nil, `{"biz_date":%q,"amount_cent":%d}`, k.Period, amount)
}

// outboxFloorSide is the hand-written floor of a transactional outbox on
// SQLite, all statements prepared once on one connection at
// synchronous=FULL (each commit is synced):
//
//	BEGIN IMMEDIATE
//	INSERT INTO idem_runs(...) VALUES(?, ?, 'done', ...) ON CONFLICT DO NOTHING  -- must insert 1 row
//	INSERT INTO daily_settle ... ON CONFLICT(biz_date) DO UPDATE ...              -- the business upsert
//	INSERT INTO outbox(id, topic, payload, created) VALUES(...)                   -- the message
//	COMMIT
//
// once per key, then the relay's part:
//
//	SELECT seq, id, topic, payload FROM outbox WHERE delivered = 0 ORDER BY seq LIMIT 100
//	(deliver: nothing)
//	UPDATE outbox SET delivered = ? WHERE seq = ? AND delivered = 0  -- one synced commit per message
//
// until the select finds none. Each delivery is marked in a commit of its
// own, so that a crash redelivers at most the message in flight.
func outboxFloorSide(ctx context.Context, dir string, n int) (side, func(), error) {
	fl, err := openFloor(ctx, filepath.Join(dir, "floor-outbox.db"))
	if err != nil {
		return side{}, nil, err
	}
	if _, err := fl.db.ExecContext(ctx, outboxTable); err != nil {
		fl.close()
		return side{}, nil, err
	}
	c, err := fl.conn(ctx, "FULL")
	if err != nil {
		fl.close()
		return side{}, nil, err
	}
	var begin, mark, biz, put, commit, pending, delivered *sql.Stmt
	for _, p := range []struct {
		s **sql.Stmt
		q string
	}{
		{&begin, `BEGIN IMMEDIATE`},
		{&mark, `INSERT INTO idem_runs(job, period, status, attempt, owner, created, updated)
			VALUES(?, ?, 'done', 1, ?, ?, ?) ON CONFLICT DO NOTHING`},
		{&biz, settleUpsert},
		{&put, `INSERT INTO outbox(id, topic, payload, created) VALUES(?, ?, ?, ?)`},
		{&commit, `COMMIT`},
		{&pending, `SELECT seq, id, topic, payload FROM outbox WHERE delivered = 0 ORDER BY seq LIMIT 100`},
		{&delivered, `UPDATE outbox SET delivered = ? WHERE seq = ? AND delivered = 0`},
	} {
		if *p.s, err = fl.prepare(ctx, c, p.q); err != nil {
			fl.close()
			return side{}, nil, err
		}
	}
	type msg struct {
		seq       int64
		id, topic string
		payload   []byte
	}
	return side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, n)
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
				err = execOne(ctx, put, k.RequestID()+"-0", "settlements", outboxPayload(k, i), now)
			}
			if err == nil {
				_, err = commit.ExecContext(ctx)
			}
			if err != nil {
				c.ExecContext(ctx, `ROLLBACK`)
				return 0, fmt.Errorf("%s: %w", k, err)
			}
		}
		sent := 0
		for {
			rows, err := pending.QueryContext(ctx)
			if err != nil {
				return 0, err
			}
			var batch []msg
			for rows.Next() {
				var m msg
				if err := rows.Scan(&m.seq, &m.id, &m.topic, &m.payload); err != nil {
					rows.Close()
					return 0, err
				}
				batch = append(batch, m)
			}
			if err := rows.Close(); err != nil {
				return 0, err
			}
			if len(batch) == 0 {
				break
			}
			for _, m := range batch {
				if len(m.payload) == 0 || m.id == "" {
					return 0, fmt.Errorf("message %d: empty", m.seq)
				}
				if err := execOne(ctx, delivered, nowMicros(), m.seq); err != nil {
					return 0, fmt.Errorf("mark %s delivered: %w", m.id, err)
				}
				sent++
			}
		}
		if sent != len(keys) {
			return 0, fmt.Errorf("floor delivered %d messages, want %d", sent, len(keys))
		}
		return len(keys), nil
	}}, fl.close, nil
}

// noticeArgs is River's job for a settlement notice: inserted in the
// business transaction (InsertTx), worked by a worker that does nothing.
type noticeArgs struct {
	BizDate    string `json:"biz_date"`
	AmountCent int    `json:"amount_cent"`
}

func (noticeArgs) Kind() string { return "idem_bench_notice" }

type noticeWorker struct {
	river.WorkerDefaults[noticeArgs]
}

func (*noticeWorker) Work(context.Context, *river.Job[noticeArgs]) error { return nil }

// outboxRiverSide is River as the outbox, on SQLite: per key one
// transaction on River's database that upserts the business row and
// inserts the notice job (InsertTx), committed; then River works every
// job (its worker does nothing) and the side returns when River has
// recorded all of them completed.
func outboxRiverSide(ctx context.Context, dir string, n int) (side, func(), error) {
	env, stop, err := openRiverSQLite(ctx, dir, n, func(w *river.Workers) { river.AddWorker(w, &noticeWorker{}) })
	if err != nil {
		return side{}, nil, err
	}
	db := env.db
	if _, err := db.ExecContext(ctx, runsTable); err != nil { // daily_settle beside River's tables
		stop()
		return side{}, nil, err
	}
	return side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, n)
		for i, k := range keys {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return 0, err
			}
			_, err = tx.ExecContext(ctx, settleUpsert, k.Period, int64(i))
			if err == nil {
				_, err = env.client.InsertTx(ctx, tx, noticeArgs{BizDate: k.Period, AmountCent: i}, nil)
			}
			if err == nil {
				err = tx.Commit()
			} else {
				tx.Rollback()
			}
			if err != nil {
				return 0, fmt.Errorf("%s: %w", k, err)
			}
		}
		return len(keys), env.awaitCompleted(ctx, len(keys))
	}}, stop, nil
}

// awaitCompleted waits until River reports n more jobs completed.
func (e *riverEnv[TTx]) awaitCompleted(ctx context.Context, n int) error {
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for range n {
		select {
		case ev, ok := <-e.done:
			if !ok {
				return errors.New("river: subscription closed")
			}
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("river: event %s", ev.Kind)
			}
		case <-timeout.C:
			return errors.New("river: jobs not worked within a minute")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// outboxIdemSide is idem's outbox on its SQLite ledger: per key one
// Ledger.RunTx that upserts the business row (a statement prepared once)
// and queues the notice with outbox.Put, then idem.RelayOnce with a
// deliverer that does nothing, until every message is marked delivered.
// The notices share one topic, so the relay delivers them one at a time
// in commit order: per message a claim (a write: lease and fencing token)
// and a delivered mark (a write).
func outboxIdemSide(ctx context.Context, l *idem.Ledger, n int) (side, func(), error) {
	if _, err := l.DB().ExecContext(ctx, runsTable); err != nil { // creates daily_settle beside the ledger
		return side{}, nil, err
	}
	upsert, err := l.DB().PrepareContext(ctx, settleUpsert)
	if err != nil {
		return side{}, nil, err
	}
	nothing := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		if len(d.Payload) == 0 || d.ID == "" {
			return idem.Permanent(fmt.Errorf("message %s: empty", d.ID))
		}
		return nil
	})
	return side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, n)
		for i, k := range keys {
			err := l.RunTx(ctx, k, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.StmtContext(ctx, upsert).ExecContext(ctx, k.Period, int64(i)); err != nil {
					return err
				}
				_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "settlements", Payload: outboxPayload(k, i)})
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		res, err := outbox.RelayOnce(ctx, l, nothing)
		if err != nil {
			return 0, err
		}
		if res.Delivered != len(keys) {
			return 0, fmt.Errorf("relay delivered %d messages, want %d (%+v)", res.Delivered, len(keys), res)
		}
		return len(keys), nil
	}}, func() { upsert.Close() }, nil
}

// outboxVsFloor: idem's outbox (RunTx + Put, RelayOnce) against the
// hand-written floor (outboxFloorSide), both on SQLite.
func outboxVsFloor(ctx context.Context, cfg config) (result, error) {
	return outboxVs(ctx, cfg, "outbox", outboxFloorSide)
}

// outboxVsRiver: idem's outbox against River as the outbox (the job
// inserted in the business transaction with InsertTx, then worked), both
// on SQLite. River works its jobs concurrently and in no order; idem
// delivers the messages of a topic one at a time, in commit order.
func outboxVsRiver(ctx context.Context, cfg config) (result, error) {
	return outboxVs(ctx, cfg, "outbox-river", outboxRiverSide)
}

// outboxVs measures idem's outbox side against other, set up in the same
// fresh directory.
func outboxVs(ctx context.Context, cfg config, pattern string, other func(ctx context.Context, dir string, n int) (side, func(), error)) (result, error) {
	dir, l, cleanup, err := ledgerInTempDir(ctx, pattern)
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	idemSide, closeIdem, err := outboxIdemSide(ctx, l, cfg.n)
	if err != nil {
		return result{}, err
	}
	defer closeIdem()
	otherSide, closeOther, err := other(ctx, dir, cfg.n)
	if err != nil {
		return result{}, err
	}
	defer closeOther()
	return alternate(ctx, cfg, idemSide, otherSide)
}
