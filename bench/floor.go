package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "modernc.org/sqlite" // the driver idem uses
)

// runsTable has the shape of idem's idem_runs and idem_jobs tables
// (ledger.go), and the business table of the RunTx comparisons.
const runsTable = `
CREATE TABLE IF NOT EXISTS idem_runs (
	job         TEXT    NOT NULL,
	period      TEXT    NOT NULL,
	status      TEXT    NOT NULL,
	attempt     INTEGER NOT NULL,
	failures    INTEGER NOT NULL DEFAULT 0,
	owner       TEXT    NOT NULL DEFAULT '',
	lease_until INTEGER NOT NULL DEFAULT 0,
	not_before  INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT    NOT NULL DEFAULT '',
	created     INTEGER NOT NULL,
	updated     INTEGER NOT NULL,
	PRIMARY KEY (job, period)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_jobs (
	job     TEXT PRIMARY KEY,
	cursor  TEXT NOT NULL DEFAULT '',
	horizon TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS daily_settle (
	biz_date    TEXT PRIMARY KEY,
	amount_cent INTEGER NOT NULL
) WITHOUT ROWID;`

// settleUpsert is the business write of the RunTx comparisons, the same
// on both sides.
const settleUpsert = `INSERT INTO daily_settle(biz_date, amount_cent) VALUES(?, ?)
	ON CONFLICT(biz_date) DO UPDATE SET amount_cent = excluded.amount_cent
	WHERE daily_settle.amount_cent <> excluded.amount_cent`

// floorDB is the hand-written floor: a SQLite file opened with the DSN idem
// uses (WAL, busy_timeout, synchronous=FULL, IMMEDIATE transactions), a
// table of idem_runs' shape, and statements prepared once on dedicated
// connections.
type floorDB struct {
	db    *sql.DB
	conns []*sql.Conn
	stmts []*sql.Stmt
}

func openFloor(ctx context.Context, path string) (*floorDB, error) {
	db, err := openSQLite(path, "floor")
	if err != nil {
		return nil, err
	}
	f := &floorDB{db: db}
	if _, err := db.ExecContext(ctx, `PRAGMA journal_mode=WAL`); err != nil {
		f.close()
		return nil, err
	}
	if _, err := db.ExecContext(ctx, runsTable); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// conn returns a dedicated connection with PRAGMA synchronous=sync
// ("NORMAL" or "FULL").
func (f *floorDB) conn(ctx context.Context, sync string) (*sql.Conn, error) {
	c, err := f.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	f.conns = append(f.conns, c)
	if _, err := c.ExecContext(ctx, `PRAGMA synchronous=`+sync); err != nil {
		return nil, err
	}
	return c, nil
}

// prepare prepares query on c, once.
func (f *floorDB) prepare(ctx context.Context, c *sql.Conn, query string) (*sql.Stmt, error) {
	s, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	f.stmts = append(f.stmts, s)
	return s, nil
}

func (f *floorDB) close() {
	for _, s := range f.stmts {
		s.Close()
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.db.Close()
}

// execOne runs s and fails unless it changed exactly one row.
func execOne(ctx context.Context, s *sql.Stmt, args ...any) error {
	res, err := s.ExecContext(ctx, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("changed %d rows, want 1 (%v)", n, err)
	}
	return nil
}

// floorOwner stands for idem's lease owner (host:pid:random, and on Linux
// the fields that prove the process's death), of the same length.
var floorOwner = func() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:0123abcd;start=1234567;boot=01234567-89ab-cdef-0123-456789abcdef;pidns=4026531836;timens=4026531834", h, os.Getpid())
}()

func nowMicros() int64 { return time.Now().UnixMicro() }
