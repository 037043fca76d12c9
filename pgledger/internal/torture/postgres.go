package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/torture/harness"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" (-pg-conn sql)
)

// dsnEnv names the database when -pg-dsn does not: the variable the
// pgledger tests use (scripts/pg.sh starts a throwaway server and prints it).
const dsnEnv = "IDEM_TEST_PG_DSN"

// pgLoc is what every process of a run needs to reach its store: the
// parent's Prepare makes it, and the workers get it in their environment.
type pgLoc struct {
	DSN    string `json:"dsn"`
	Schema string `json:"schema"`
	Conn   string `json:"conn"` // connPool or connSQL
}

// The connections a worker's ledger can use (-pg-conn).
const (
	connPool = "pool" // pgledger.New on a pgx pool
	connSQL  = "sql"  // pgledger.NewDB on a *sql.DB with pgx's stdlib driver
)

// workersCreate leaves the ledger's creation to the workers (a
// rolling-upgrade test's old release: Config.FirstCreates).
var workersCreate bool

func postgresBackend() *harness.Backend {
	var dsnFlag string
	connFlag := connPool
	return &harness.Backend{
		Name:   "postgres",
		Tx:     true,
		Outbox: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dsnFlag, "pg-dsn", "", "-store postgres: the database (default $"+dsnEnv+"); each run keeps its tables in a new schema there")
			fs.StringVar(&connFlag, "pg-conn", connPool, "-store postgres: each worker's ledger on a pgx pool ("+connPool+": pgledger.New) or on a *sql.DB with pgx's stdlib driver ("+connSQL+": pgledger.NewDB, RunTx with *sql.Tx)")
		},
		Prepare: func(ctx context.Context, dir string) (string, string, error) {
			dsn := dsnFlag
			if dsn == "" {
				dsn = os.Getenv(dsnEnv)
			}
			if dsn == "" {
				return "", "", harness.UsageError(fmt.Errorf("-store postgres needs a database: -pg-dsn or $%s (scripts/pg.sh starts a throwaway one)", dsnEnv))
			}
			if connFlag != connPool && connFlag != connSQL {
				return "", "", harness.UsageError(fmt.Errorf("-pg-conn %q: want %s or %s", connFlag, connPool, connSQL))
			}
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				return "", "", harness.UsageError(fmt.Errorf("-pg-dsn: %w", err))
			}
			var b [4]byte
			_, _ = rand.Read(b[:])
			loc := pgLoc{DSN: dsn, Schema: "idem_torture_" + time.Now().UTC().Format("20060102t150405") + "_" + hex.EncodeToString(b[:]), Conn: connFlag}
			// Create the ledger now: the workers then find it (and the
			// check finds it even if no worker ever started).
			if !workersCreate {
				l, err := pgledger.Open(ctx, dsn, pgledger.WithSchema(loc.Schema))
				if err != nil {
					return "", "", err
				}
				l.Close()
			}
			// For a kept directory: which schema holds its store.
			if err := os.WriteFile(filepath.Join(dir, "postgres-schema.txt"), []byte(loc.Schema+"\n"), 0o644); err != nil {
				return "", "", err
			}
			j, err := json.Marshal(loc)
			if err != nil {
				return "", "", err
			}
			each := "a pgx pool per worker process"
			if loc.Conn == connSQL {
				each = "a *sql.DB (pgx stdlib driver) per worker process"
			}
			desc := fmt.Sprintf("postgres database %s on %s:%d, schema %s (%s)",
				cfg.ConnConfig.Database, cfg.ConnConfig.Host, cfg.ConnConfig.Port, loc.Schema, each)
			return string(j), desc, nil
		},
		Open: func(ctx context.Context, dir, locJSON string) (*harness.Handle, error) {
			var loc pgLoc
			if err := json.Unmarshal([]byte(locJSON), &loc); err != nil || loc.Schema == "" {
				return nil, fmt.Errorf("bad postgres locator %q: %v", locJSON, err)
			}
			return openPostgres(ctx, loc)
		},
		Cleanup: func(ctx context.Context, locJSON string) error {
			var loc pgLoc
			if err := json.Unmarshal([]byte(locJSON), &loc); err != nil {
				return err
			}
			conn, err := pgx.Connect(ctx, loc.DSN)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{loc.Schema}.Sanitize()+` CASCADE`)
			return err
		},
	}
}

// openPostgres opens a worker's ledger on the connection loc names.
func openPostgres(ctx context.Context, loc pgLoc) (*harness.Handle, error) {
	tx := pgTx{loc: loc}
	if loc.Conn == connSQL {
		db, err := sql.Open("pgx", loc.DSN)
		if err != nil {
			return nil, err
		}
		l, err := pgledger.NewDB(ctx, db, pgledger.WithSchema(loc.Schema))
		if err != nil {
			db.Close()
			return nil, err
		}
		execSQL := func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}
		tx.runTx = runTxOf(l.RunTx, execSQL)
		ob := pgOutbox{loc: loc, store: l, runTx: outboxRunTxOf(l.RunTx, execSQL)}
		return &harness.Handle{Store: l, Close: db.Close, Tx: tx, Outbox: ob}, nil
	}
	l, err := pgledger.Open(ctx, loc.DSN, pgledger.WithSchema(loc.Schema))
	if err != nil {
		return nil, err
	}
	execPgx := func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
		_, err := tx.Exec(ctx, q, args...)
		return err
	}
	tx.runTx = runTxOf(l.RunTx, execPgx)
	ob := pgOutbox{loc: loc, store: l, runTx: outboxRunTxOf(l.RunTx, execPgx)}
	return &harness.Handle{Store: l, Close: func() error { l.Close(); return nil }, Tx: tx, Outbox: ob}, nil
}

// pgTx is the tx mode on the Postgres ledger: the effect is a row of a
// table in the ledger's schema, written through RunTx's transaction (a
// pgx.Tx on a pool, a *sql.Tx on a *sql.DB). Setup and Counts use a
// connection of their own.
type pgTx struct {
	loc pgLoc
	// runTx is the ledger's RunTx; exec runs a statement in its transaction.
	runTx func(ctx context.Context, key idem.Key, fn func(ctx context.Context, exec func(ctx context.Context, q string, args ...any) error) error, opts ...idem.Option) error
}

// runTxOf is pgTx.runTx for a ledger whose transactions are T.
func runTxOf[T any](runTx func(context.Context, idem.Key, func(context.Context, T) error, ...idem.Option) error,
	exec func(ctx context.Context, tx T, q string, args ...any) error) func(context.Context, idem.Key, func(context.Context, func(context.Context, string, ...any) error) error, ...idem.Option) error {
	return func(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context, string, ...any) error) error, opts ...idem.Option) error {
		return runTx(ctx, key, func(ctx context.Context, tx T) error {
			return fn(ctx, func(ctx context.Context, q string, args ...any) error { return exec(ctx, tx, q, args...) })
		}, opts...)
	}
}

func (p pgTx) table() string { return pgx.Identifier{p.loc.Schema, "effects"}.Sanitize() }

func (p pgTx) Setup(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.loc.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.table()+` (key text PRIMARY KEY, n int NOT NULL)`)
	return err
}

func (p pgTx) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context) error) error, opts ...idem.Option) error {
	// NOT idempotent on purpose, so that a second application shows as n = 2.
	bump := `INSERT INTO ` + p.table() + ` AS e (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = e.n + 1`
	return p.runTx(ctx, key, func(ctx context.Context, exec func(context.Context, string, ...any) error) error {
		return fn(ctx, func(ctx context.Context) error { return exec(ctx, bump, key.String()) })
	}, opts...)
}

func (p pgTx) Counts(ctx context.Context) (map[string]int, error) {
	conn, err := pgx.Connect(ctx, p.loc.DSN)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT key, n FROM `+p.table())
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	var k string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { m[k] = n; return nil }); err != nil {
		return nil, err
	}
	return m, nil
}
