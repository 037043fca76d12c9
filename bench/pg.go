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
type pgProvider = serverProvider

func newPGProvider(dsn string) *pgProvider {
	return &serverProvider{given: dsn, what: "Postgres", flag: "-pg-dsn", env: "IDEM_TEST_PG_DSN", script: "pg.sh"}
}

// serverProvider finds a server: the address or DSN given (a flag, or an
// environment variable by default), else a throwaway server started with
// the repository's scripts/<script> start (which prints export
// VAR='value') and stopped by close.
type serverProvider struct {
	given             string
	what              string // "Postgres", "Redis"
	flag, env, script string // for the messages, and the script's name
	once              sync.Once
	value             string
	why               string // why there is none
	started           bool
	scriptPath        string
}

// get returns a DSN or address, or "" and the reason there is none.
func (p *serverProvider) get() (string, string) {
	p.once.Do(func() {
		if p.given != "" {
			p.value = p.given
			return
		}
		script, err := filepath.Abs(filepath.Join("..", "scripts", p.script)) // go run . runs in bench/
		if err == nil {
			_, err = os.Stat(script)
		}
		if err != nil {
			p.why = fmt.Sprintf("no %s: no %s, no %s, and no ../scripts/%s to start one", p.what, p.flag, p.env, p.script)
			return
		}
		var out, errOut bytes.Buffer
		cmd := exec.Command("bash", script, "start")
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			p.why = fmt.Sprintf("no %s: scripts/%s start failed: %v: %s", p.what, p.script, err, strings.TrimSpace(errOut.String()))
			return
		}
		// It prints: export VAR='value'
		line := strings.TrimSpace(out.String())
		_, value, ok := strings.Cut(line, "=")
		value = strings.Trim(value, `'"`)
		if !ok || value == "" {
			p.why = fmt.Sprintf("no %s: scripts/%s start printed %s", p.what, p.script, line)
			return
		}
		p.value, p.started, p.scriptPath = value, true, script
	})
	return p.value, p.why
}

// close stops the server get started, if it did.
func (p *serverProvider) close() {
	if p.started {
		_ = exec.Command("bash", p.scriptPath, "stop", p.value).Run()
		p.started = false
	}
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// pgEnv is an idem pgledger and a River client (riverpgxv5) or a floor on
// one database, each in a fresh schema of its own, dropped at the end.
type pgEnv struct {
	ledger     *pgledger.Ledger
	idemPool   *pgxpool.Pool // the ledger's
	river      *riverEnv[pgx.Tx]
	pool       *pgxpool.Pool // River's, or the floor's; drops the schemas
	floor      string        // the floor's schema, quoted: tables of the ledger's shape
	dsn        string
	drop       []string
	extraPools []*pgxpool.Pool
}

// pgOptions says what openPG sets up beside the ledger.
type pgOptions struct {
	river    bool
	floor    bool
	maxConns int32 // of the ledger's pool and the floor's; 0 for pgxpool's default
}

func openPG(ctx context.Context, cfg config) (*pgEnv, string, error) {
	return openPGWith(ctx, cfg, pgOptions{river: true})
}

func openPGWith(ctx context.Context, cfg config, o pgOptions) (*pgEnv, string, error) {
	if cfg.pg == nil {
		return nil, "no Postgres: IDEM_TEST_PG_DSN is not set", nil
	}
	dsn, why := cfg.pg.get()
	if dsn == "" {
		return nil, why, nil
	}
	e := &pgEnv{dsn: dsn}
	idemSchema := randomName("idem_bench_")
	ip, err := pgPool(ctx, dsn, "idem", o.maxConns, nil)
	if err != nil {
		return nil, "", err
	}
	e.idemPool = ip
	e.drop = append(e.drop, idemSchema)
	l, err := pgledger.New(ctx, ip, pgledger.WithSchema(idemSchema))
	if err != nil {
		e.close(ctx)
		return nil, "", err
	}
	e.ledger = l
	role := "river"
	if o.floor {
		role = "floor"
	}
	pool, err := pgPool(ctx, dsn, role, o.maxConns, nil)
	if err != nil {
		e.close(ctx)
		return nil, "", err
	}
	e.pool = pool
	if o.floor {
		// The floor's tables: the ledger's own, made by pgledger in a
		// schema of their own (untimed); the floor's SQL is its own.
		floorSchema := randomName("floor_bench_")
		e.drop = append(e.drop, floorSchema)
		if _, err := pgledger.New(ctx, pool, pgledger.WithSchema(floorSchema)); err != nil {
			e.close(ctx)
			return nil, "", err
		}
		e.floor = pgx.Identifier{floorSchema}.Sanitize()
	}
	if o.river {
		riverSchema := randomName("river_bench_")
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
	}
	return e, "", nil
}

func (e *pgEnv) close(ctx context.Context) {
	if e.river != nil {
		e.river.stop(ctx)
	}
	for _, p := range e.extraPools {
		p.Close()
	}
	if e.idemPool != nil {
		e.idemPool.Close()
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
