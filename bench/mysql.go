package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/mysqlledger"
)

// The MySQL comparisons: mysqlledger against hand-written SQL on the same
// server (MariaDB from ../scripts/mysql.sh, or -mysql-dsn), with the same
// durability: every commit of both sides is flushed by the server
// (innodb_flush_log_at_trx_commit=1 and sync_binlog=1: a MySQL session
// cannot turn that off for one transaction, as Postgres's
// synchronous_commit can, so every claim of either side is synced too).
// Both sides connect with the same DSN, with interpolateParams=true (one
// round trip per statement; the ledger's documentation recommends it),
// each through a *sql.DB of its own.

func newMySQLProvider(dsn string) *serverProvider {
	return &serverProvider{given: dsn, what: "MySQL", flag: "-mysql-dsn", env: "IDEM_TEST_MYSQL_DSN", script: "mysql.sh"}
}

// mysqlEnv is a mysqlledger and a floor on one database, each with tables
// of a prefix of its own, dropped at the end.
type mysqlEnv struct {
	ledger   *mysqlledger.Ledger
	idemDB   *sql.DB // the ledger's
	db       *sql.DB // the floor's
	dsn      string
	floor    string // the floor's table prefix: tables of the ledger's shape
	prefixes []string
	extra    []*sql.DB
}

// mysqlDB opens dsn with interpolateParams=true.
func mysqlDB(dsn string) (*sql.DB, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c.InterpolateParams = true
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(16)
	return db, nil
}

func openMySQL(ctx context.Context, cfg config) (*mysqlEnv, string, error) {
	if cfg.mysql == nil {
		return nil, "no MySQL: IDEM_TEST_MYSQL_DSN is not set", nil
	}
	dsn, why := cfg.mysql.get()
	if dsn == "" {
		return nil, why, nil
	}
	e := &mysqlEnv{dsn: dsn}
	var err error
	if e.idemDB, err = mysqlDB(dsn); err != nil {
		return nil, "", err
	}
	if e.db, err = mysqlDB(dsn); err != nil {
		e.idemDB.Close()
		return nil, "", err
	}
	idemPrefix := randomName("ib_") + "_"
	e.prefixes = append(e.prefixes, idemPrefix)
	if e.ledger, err = mysqlledger.New(ctx, e.idemDB, mysqlledger.WithTablePrefix(idemPrefix)); err != nil {
		e.close(ctx)
		return nil, "", err
	}
	// The floor's tables: the ledger's own, made by mysqlledger with a
	// prefix of their own (untimed); the floor's SQL is its own.
	e.floor = randomName("fb_") + "_"
	e.prefixes = append(e.prefixes, e.floor)
	if _, err := mysqlledger.New(ctx, e.db, mysqlledger.WithTablePrefix(e.floor)); err != nil {
		e.close(ctx)
		return nil, "", err
	}
	return e, "", nil
}

// table is the quoted name of the floor's table name.
func (e *mysqlEnv) table(name string) string { return "`" + e.floor + name + "`" }

// extraLedger opens one more ledger on e's tables, through a *sql.DB of
// its own (another host, as far as the server can tell).
func (e *mysqlEnv) extraLedger(ctx context.Context) (*mysqlledger.Ledger, error) {
	db, err := e.extraDB()
	if err != nil {
		return nil, err
	}
	return mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(e.ledger.Prefix()))
}

func (e *mysqlEnv) extraDB() (*sql.DB, error) {
	db, err := mysqlDB(e.dsn)
	if err != nil {
		return nil, err
	}
	e.extra = append(e.extra, db)
	return db, nil
}

func (e *mysqlEnv) close(ctx context.Context) {
	for _, db := range e.extra {
		db.Close()
	}
	if e.idemDB != nil {
		e.idemDB.Close()
	}
	if e.db == nil {
		return
	}
	for _, p := range e.prefixes {
		rows, err := e.db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
			WHERE table_schema = DATABASE() AND table_name LIKE ?`, strings.ReplaceAll(p, "_", `\_`)+"%")
		if err != nil {
			continue
		}
		var names []string
		for rows.Next() {
			var n string
			if rows.Scan(&n) == nil {
				names = append(names, "`"+n+"`")
			}
		}
		rows.Close()
		if len(names) > 0 {
			_, _ = e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+strings.Join(names, ", "))
		}
	}
	e.db.Close()
}

// mysqlFloor is the floor's claim and done mark of a new key, on the
// floor's runs table.
type mysqlFloor struct {
	db                  *sql.DB
	claim, done, status string
}

func newMySQLFloor(e *mysqlEnv) *mysqlFloor {
	r := strings.NewReplacer("{runs}", e.table("runs"), "{jobs}", e.table("jobs"))
	return &mysqlFloor{
		db: e.db,
		// The claim: one INSERT that also checks the job's horizon (a
		// primary-key probe of jobs), in a transaction of its own.
		claim: r.Replace(`INSERT IGNORE INTO {runs} (job, period, status, attempt, failures, owner, lease_until, not_before,
			last_error, created, updated, fingerprint)
			SELECT ?, ?, 'running', 1, 0, ?, t.n + 60000000, 0, '', t.n, t.n, ''
			FROM (SELECT ` + mysqlNowSQL + ` AS n) AS t
			WHERE NOT EXISTS (SELECT 1 FROM {jobs} WHERE job = ? AND horizon >= ?)`),
		done: r.Replace(`UPDATE {runs} SET status = 'done', lease_until = 0, updated = ` + mysqlNowSQL + `
			WHERE job = ? AND period = ? AND attempt = 1 AND status = 'running'`),
		status: r.Replace(`SELECT status FROM {runs} WHERE job = ? AND period = ?`),
	}
}

// mysqlNowSQL is the server's time in microseconds, as the ledger writes it.
const mysqlNowSQL = `CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS SIGNED)`

// mustOne checks that a statement changed one row.
func mustOne(res sql.Result, err error, what string, k idem.Key) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("floor: %s of %s changed %d rows", what, k, n)
	}
	return nil
}

// run is the floor's Run of a new key: the claim (one statement, its
// commit synced), fn, the done mark (one statement, synced).
func (f *mysqlFloor) run(ctx context.Context, k idem.Key, fn func(context.Context) error) error {
	res, err := f.db.ExecContext(ctx, f.claim, k.Job, k.Period, floorOwner, k.Job, k.Period)
	if err := mustOne(res, err, "claim", k); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		return err
	}
	res, err = f.db.ExecContext(ctx, f.done, k.Job, k.Period)
	return mustOne(res, err, "done mark", k)
}

// mysqlFreshRunVsFloor: mysqlledger's Run (AtLeastOnce) of new keys
// against the floor's claim and done mark, each one autocommitted
// statement (two round trips, two synced commits):
//
//	INSERT IGNORE INTO runs (...) SELECT ... WHERE NOT EXISTS (horizon)   -- 1 row
//	UPDATE runs SET status = 'done', ... WHERE job, period, attempt = 1, status = 'running'  -- 1 row
func mysqlFreshRunVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openMySQL(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	f := newMySQLFloor(e)
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

// mysqlDuplicateVsFloor: mysqlledger's Run of keys already done against
// one primary-key read of the status:
//
//	SELECT status FROM runs WHERE job = ? AND period = ?   -- must say 'done'
func mysqlDuplicateVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openMySQL(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	f := newMySQLFloor(e)
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
				if err := f.db.QueryRowContext(ctx, f.status, k.Job, k.Period).Scan(&status); err != nil {
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

// mysqlSettleUpsert is the business write of mysql_runtx_vs_floor, the
// same on both sides (each in a table of its own).
const mysqlSettleUpsert = `INSERT INTO {t} (biz_date, amount_cent) VALUES (?, ?)
	ON DUPLICATE KEY UPDATE amount_cent = VALUES(amount_cent)`

const mysqlSettleTable = `CREATE TABLE {t} (biz_date VARBINARY(64) NOT NULL PRIMARY KEY, amount_cent BIGINT NOT NULL) ENGINE=InnoDB`

// mysqlRunTxVsFloor: mysqlledger's RunTx of new keys with one business
// upsert against the same upsert and the key's done mark in one
// transaction by hand, through a *sql.Tx as RunTx's fn gets one:
//
//	START TRANSACTION
//	INSERT INTO runs (...) VALUES (..., 'done', ...)                     -- 1 row
//	INSERT INTO daily_settle ... ON DUPLICATE KEY UPDATE ...             -- the upsert
//	COMMIT                                                               -- synced
//
// four round trips, one synced commit.
func mysqlRunTxVsFloor(ctx context.Context, cfg config) (result, error) {
	e, why, err := openMySQL(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	idemT, floorT := e.ledger.Table("daily_settle"), e.table("daily_settle")
	for _, t := range []string{idemT, floorT} {
		if _, err := e.db.ExecContext(ctx, strings.ReplaceAll(mysqlSettleTable, "{t}", t)); err != nil {
			return result{}, err
		}
	}
	idemUpsert := strings.ReplaceAll(mysqlSettleUpsert, "{t}", idemT)
	idemSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, cfg.n)
		for i, k := range keys {
			err := e.ledger.RunTx(ctx, k, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, idemUpsert, k.Period, int64(i))
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	floorUpsert := strings.ReplaceAll(mysqlSettleUpsert, "{t}", floorT)
	mark := `INSERT INTO ` + e.table("runs") + ` (job, period, status, attempt, failures, owner, lease_until, not_before,
		last_error, created, updated, fingerprint) VALUES (?, ?, 'done', 1, 0, ?, 0, 0, '', ` + mysqlNowSQL + `, ` + mysqlNowSQL + `, '')`
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("settle", round, cfg.n)
		for i, k := range keys {
			if err := mysqlFloorTx(ctx, e.db, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, mark, k.Job, k.Period, floorOwner)
				if err := mustOne(res, err, "done mark", k); err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, floorUpsert, k.Period, int64(i))
				return err
			}); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}}
	return alternate(ctx, cfg, idemSide, floorSide)
}

// mysqlFloorTx runs fn in a transaction (the server's default isolation)
// and commits it.
func mysqlFloorTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// The floor's fan-out table: a period's chunks of up to 500 item ids
// (joined by newlines), each claimed and marked done as a whole.
const mysqlFanChunksTable = `CREATE TABLE {t} (
	job VARBINARY(255) NOT NULL, period VARBINARY(255) NOT NULL, chunk INT NOT NULL,
	items MEDIUMBLOB NOT NULL, status VARCHAR(16) NOT NULL DEFAULT 'pending',
	attempt INT NOT NULL DEFAULT 0, owner VARCHAR(255) NOT NULL DEFAULT '', lease_until BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (job, period, chunk), KEY pending (job, period, status, chunk)) ENGINE=InnoDB`

// mysqlFanoutVsFloor: Each over n no-op items from 4 clients at once (a
// *sql.DB of their own each) against the same chunks claimed by hand from
// 4 clients at once: per round, one INSERT of the period's chunks (500
// item ids each, one statement), then each client in a loop, until no
// chunk is left:
//
//	START TRANSACTION
//	SELECT chunk, attempt, items FROM fan_chunks WHERE job, period, status = 'pending'
//	  ORDER BY chunk LIMIT 1 FOR UPDATE SKIP LOCKED
//	UPDATE fan_chunks SET status = 'running', attempt = attempt + 1, ... WHERE job, period, chunk
//	COMMIT                                                               -- synced
//	fn for each item
//	UPDATE fan_chunks SET status = 'done' WHERE ... AND attempt = ? AND status = 'running'   -- synced
func mysqlFanoutVsFloor(ctx context.Context, cfg config) (result, error) {
	n := cfg.n * fanoutItems
	e, why, err := openMySQL(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	ls := []*mysqlledger.Ledger{e.ledger}
	for len(ls) < pgFanoutClients {
		l, err := e.extraLedger(ctx)
		if err != nil {
			return result{}, err
		}
		ls = append(ls, l)
	}
	t := e.table("fan_chunks")
	if _, err := e.db.ExecContext(ctx, strings.ReplaceAll(mysqlFanChunksTable, "{t}", t)); err != nil {
		return result{}, err
	}
	dbs := []*sql.DB{e.db}
	for len(dbs) < pgFanoutClients {
		db, err := e.extraDB()
		if err != nil {
			return result{}, err
		}
		dbs = append(dbs, db)
	}
	ids := fanoutItemIDs(n)
	var insert strings.Builder
	insert.WriteString(`INSERT INTO ` + t + ` (job, period, chunk, items) VALUES `)
	var chunks []any
	for c := 0; c*fanoutBatch < n; c++ {
		if c > 0 {
			insert.WriteString(", ")
		}
		insert.WriteString("(?, ?, ?, ?)")
		chunks = append(chunks, "fanout", "", c+1, strings.Join(ids[c*fanoutBatch:min(n, (c+1)*fanoutBatch)], "\n"))
	}
	claimSQL := `SELECT chunk, attempt, items FROM ` + t + ` WHERE job = ? AND period = ? AND status = 'pending'
		ORDER BY chunk LIMIT 1 FOR UPDATE SKIP LOCKED`
	takeSQL := `UPDATE ` + t + ` SET status = 'running', attempt = attempt + 1, owner = ?,
		lease_until = ` + mysqlNowSQL + ` + 60000000 WHERE job = ? AND period = ? AND chunk = ?`
	doneSQL := `UPDATE ` + t + ` SET status = 'done', lease_until = 0
		WHERE job = ? AND period = ? AND chunk = ? AND attempt = ? AND status = 'running'`
	fn := func(context.Context, string) error { return nil }
	worker := func(ctx context.Context, db *sql.DB, period string) (int, error) {
		applied := 0
		for {
			var chunk, attempt int
			var items string
			found := true
			err := mysqlFloorTx(ctx, db, func(tx *sql.Tx) error {
				err := tx.QueryRowContext(ctx, claimSQL, "fanout", period).Scan(&chunk, &attempt, &items)
				if errors.Is(err, sql.ErrNoRows) {
					found = false
					return nil
				}
				if err != nil {
					return err
				}
				attempt++
				_, err = tx.ExecContext(ctx, takeSQL, floorOwner, "fanout", period, chunk)
				return err
			})
			if err != nil || !found {
				return applied, err
			}
			list := strings.Split(items, "\n")
			for _, it := range list {
				if err := fn(ctx, it); err != nil {
					return applied, err
				}
			}
			res, err := db.ExecContext(ctx, doneSQL, "fanout", period, chunk, attempt)
			if err := mustOne(res, err, fmt.Sprintf("chunk %d's done mark", chunk), idem.Key{Job: "fanout", Period: period}); err != nil {
				return applied, err
			}
			applied += len(list)
		}
	}
	floorSide := side{ops: func(ctx context.Context, round int) (int, error) {
		period := fmt.Sprintf("%03d", round)
		for i := 1; i < len(chunks); i += 4 {
			chunks[i] = period
		}
		if _, err := e.db.ExecContext(ctx, insert.String(), chunks...); err != nil {
			return 0, err
		}
		applied := make([]int, len(dbs))
		errs := make([]error, len(dbs))
		var wg sync.WaitGroup
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				applied[i], errs[i] = worker(ctx, db, period)
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
	return alternate(ctx, cfg, mysqlLedgerFanoutSide(ls, n), floorSide)
}

// mysqlLedgerFanoutSide is pgLedgerFanoutSide on mysqlledger.
func mysqlLedgerFanoutSide(ls []*mysqlledger.Ledger, n int) side {
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
