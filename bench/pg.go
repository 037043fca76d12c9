package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// pgProvider finds a PostgreSQL for the pg_ comparisons: the -pg-dsn flag
// or $IDEM_TEST_PG_DSN, else a throwaway server started with the
// repository's scripts/pg.sh (the way the tests get one) and stopped at the
// end.
type pgProvider struct {
	given   string
	once    sync.Once
	dsn     string
	why     string // why there is none
	started bool
	script  string
}

func newPGProvider(dsn string) *pgProvider { return &pgProvider{given: dsn} }

// get returns a DSN, or "" and the reason there is none.
func (p *pgProvider) get() (string, string) {
	if p == nil {
		return "", "no Postgres: IDEM_TEST_PG_DSN is not set"
	}
	p.once.Do(func() {
		if p.given != "" {
			p.dsn = p.given
			return
		}
		script, err := filepath.Abs(filepath.Join("..", "scripts", "pg.sh")) // go run . runs in bench/
		if err == nil {
			_, err = os.Stat(script)
		}
		if err != nil {
			p.why = "no Postgres: no -pg-dsn, no IDEM_TEST_PG_DSN, and no ../scripts/pg.sh to start one"
			return
		}
		var out, errOut bytes.Buffer
		cmd := exec.Command("bash", script, "start")
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			p.why = fmt.Sprintf("no Postgres: scripts/pg.sh start failed: %v: %s", err, strings.TrimSpace(errOut.String()))
			return
		}
		// It prints: export IDEM_TEST_PG_DSN='postgres://...'
		line := strings.TrimSpace(out.String())
		_, dsn, ok := strings.Cut(line, "=")
		dsn = strings.Trim(dsn, `'"`)
		if !ok || dsn == "" {
			p.why = "no Postgres: scripts/pg.sh start printed " + line
			return
		}
		p.dsn, p.started, p.script = dsn, true, script
	})
	return p.dsn, p.why
}

func (p *pgProvider) close() {
	if p != nil && p.started {
		_ = exec.Command("bash", p.script, "stop", p.dsn).Run()
		p.started = false
	}
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// pgEnv is an idem pgledger and a River client (riverpgxv5) on one
// database, each in a fresh schema of its own, dropped at the end.
type pgEnv struct {
	ledger *pgledger.Ledger
	river  *riverEnv[pgx.Tx]
	pool   *pgxpool.Pool // River's
	drop   []string
}

func openPG(ctx context.Context, cfg config) (*pgEnv, string, error) {
	dsn, why := cfg.pg.get()
	if dsn == "" {
		return nil, why, nil
	}
	e := &pgEnv{}
	idemSchema, riverSchema := randomName("idem_bench_"), randomName("river_bench_")
	l, err := pgledger.Open(ctx, dsn, pgledger.WithSchema(idemSchema))
	if err != nil {
		return nil, "", err
	}
	e.ledger = l
	e.drop = append(e.drop, idemSchema)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		e.close(ctx)
		return nil, "", err
	}
	e.pool = pool
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{riverSchema}.Sanitize()); err != nil {
		e.close(ctx)
		return nil, "", err
	}
	e.drop = append(e.drop, riverSchema)
	e.river, err = startRiver(ctx, riverpgxv5.New(pool), riverSchema, cfg.n)
	if err != nil {
		e.close(ctx)
		return nil, "", err
	}
	return e, "", nil
}

func (e *pgEnv) close(ctx context.Context) {
	if e.river != nil {
		e.river.stop(ctx)
	}
	if e.ledger != nil {
		e.ledger.Close()
	}
	if e.pool != nil {
		for _, s := range e.drop {
			_, _ = e.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`)
		}
		e.pool.Close()
	}
}

// pgFreshRunVsRiver: pgledger's Run of new keys against River on Postgres:
// one unique job per key, inserted and worked.
func pgFreshRunVsRiver(ctx context.Context, cfg config) (result, error) {
	e, why, err := openPG(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	return alternate(ctx, cfg, ledgerFreshSide(e.ledger, cfg.n), side{ops: func(ctx context.Context, round int) (int, error) {
		keys := roundKeys("fresh", round, cfg.n)
		return len(keys), e.river.insertAndWork(ctx, keys)
	}})
}

// pgDuplicateVsRiver: pgledger's Run of keys already done against River's
// skipped insert of a unique job that exists (completed).
func pgDuplicateVsRiver(ctx context.Context, cfg config) (result, error) {
	e, why, err := openPG(ctx, cfg)
	if err != nil || e == nil {
		return result{skipped: why}, err
	}
	defer e.close(ctx)
	keys := roundKeys("dup", 0, cfg.n)
	if err := e.river.insertAndWork(ctx, keys); err != nil {
		return result{}, err
	}
	idemSide, err := ledgerDuplicateSide(ctx, e.ledger, keys)
	if err != nil {
		return result{}, err
	}
	return alternate(ctx, cfg, idemSide, side{ops: func(ctx context.Context, round int) (int, error) {
		return len(keys), e.river.insertDuplicates(ctx, keys)
	}})
}
