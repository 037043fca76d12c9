package main

import (
	"context"
	"crypto/rand"
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
)

// dsnEnv names the database when -pg-dsn does not: the variable the
// pgledger tests use (scripts/pg.sh starts a throwaway server and prints it).
const dsnEnv = "IDEM_TEST_PG_DSN"

// pgLoc is what every process of a run needs to reach its store: the
// parent's Prepare makes it, and the workers get it in their environment.
type pgLoc struct {
	DSN    string `json:"dsn"`
	Schema string `json:"schema"`
}

func postgresBackend() *harness.Backend {
	var dsnFlag string
	return &harness.Backend{
		Name: "postgres",
		Tx:   true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dsnFlag, "pg-dsn", "", "-store postgres: the database (default $"+dsnEnv+"); each run keeps its tables in a new schema there")
		},
		Prepare: func(ctx context.Context, dir string) (string, string, error) {
			dsn := dsnFlag
			if dsn == "" {
				dsn = os.Getenv(dsnEnv)
			}
			if dsn == "" {
				return "", "", harness.UsageError(fmt.Errorf("-store postgres needs a database: -pg-dsn or $%s (scripts/pg.sh starts a throwaway one)", dsnEnv))
			}
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				return "", "", harness.UsageError(fmt.Errorf("-pg-dsn: %w", err))
			}
			var b [4]byte
			_, _ = rand.Read(b[:])
			loc := pgLoc{DSN: dsn, Schema: "idem_torture_" + time.Now().UTC().Format("20060102t150405") + "_" + hex.EncodeToString(b[:])}
			// Create the ledger now: the workers then find it (and the
			// check finds it even if no worker ever started).
			l, err := pgledger.Open(ctx, dsn, pgledger.WithSchema(loc.Schema))
			if err != nil {
				return "", "", err
			}
			l.Close()
			// For a kept directory: which schema holds its store.
			if err := os.WriteFile(filepath.Join(dir, "postgres-schema.txt"), []byte(loc.Schema+"\n"), 0o644); err != nil {
				return "", "", err
			}
			j, err := json.Marshal(loc)
			if err != nil {
				return "", "", err
			}
			desc := fmt.Sprintf("postgres database %s on %s:%d, schema %s (a pool per worker process)",
				cfg.ConnConfig.Database, cfg.ConnConfig.Host, cfg.ConnConfig.Port, loc.Schema)
			return string(j), desc, nil
		},
		Open: func(ctx context.Context, dir, locJSON string) (*harness.Handle, error) {
			var loc pgLoc
			if err := json.Unmarshal([]byte(locJSON), &loc); err != nil || loc.Schema == "" {
				return nil, fmt.Errorf("bad postgres locator %q: %v", locJSON, err)
			}
			l, err := pgledger.Open(ctx, loc.DSN, pgledger.WithSchema(loc.Schema))
			if err != nil {
				return nil, err
			}
			return &harness.Handle{Store: l, Close: func() error { l.Close(); return nil }, Tx: pgTx{l}}, nil
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

// pgTx is the tx mode on the Postgres ledger: the effect is a row of a
// table in the ledger's schema, written through Ledger.RunTx's pgx.Tx.
type pgTx struct{ l *pgledger.Ledger }

func (p pgTx) table() string { return pgx.Identifier{p.l.Schema(), "effects"}.Sanitize() }

func (p pgTx) Setup(ctx context.Context) error {
	_, err := p.l.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.table()+` (key text PRIMARY KEY, n int NOT NULL)`)
	return err
}

func (p pgTx) RunTx(ctx context.Context, key idem.Key, fn func(context.Context, func(context.Context) error) error, opts ...idem.RunTxOption) error {
	// NOT idempotent on purpose, so that a second application shows as n = 2.
	bump := `INSERT INTO ` + p.table() + ` AS e (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = e.n + 1`
	return p.l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
		return fn(ctx, func(ctx context.Context) error {
			_, err := tx.Exec(ctx, bump, key.String())
			return err
		})
	}, opts...)
}

func (p pgTx) Counts(ctx context.Context) (map[string]int, error) {
	rows, err := p.l.Pool().Query(ctx, `SELECT key, n FROM `+p.table())
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
