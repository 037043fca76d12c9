package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/torture/harness"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
)

// TestRollingUpgradePostgres runs the previous release's workers (built
// from git history: the commit before the last change of pgledger's
// SchemaVersion) and this tree's together on one Postgres schema, with
// SIGKILLs of random workers and their restarts: on a schema created by
// this tree (the old workers attach to a schema one version newer than
// theirs), with RunTx (no key's effect twice), and on one created by the old
// workers, which this tree's then migrate while they run, with Run
// AtLeastOnce (duplicates only around kills, as the torture checker
// allows). Every key must end done, and no worker may exit with an error
// (ErrNewerSchema in particular).
func TestRollingUpgradePostgres(t *testing.T) {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatalf("%s is not set, and CI must run the postgres tests: run scripts/test.sh (it starts PostgreSQL)", dsnEnv)
		}
		t.Skipf("no PostgreSQL: run scripts/test.sh (it starts a throwaway server), or set %s", dsnEnv)
	}
	old := harness.OldWorker(t, harness.Release{File: "pgledger/ledger.go", Version: pgledger.SchemaVersion, Module: "pgledger", Pkg: "./internal/torture"})
	for _, c := range []struct {
		name, mode string
		oldCreates bool
	}{
		{"new-schema/tx", "tx", false},
		{"old-schema/atleastonce", "atleastonce", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			seed := time.Now().UnixNano()
			dir := t.TempDir()
			t.Cleanup(func() { dropSchemaOf(t, dsn, dir) })
			workersCreate = c.oldCreates
			defer func() { workersCreate = false }()
			s, err := harness.Run(harness.Config{
				Store: "postgres", Mode: c.mode,
				Kills: 20, Keys: 100, Workers: 4,
				Exes: []string{old, ""}, FirstCreates: c.oldCreates,
				Seed: seed, Duration: 8 * time.Second, Settle: time.Minute,
				Dir: dir, Lease: 100 * time.Millisecond, Stall: 30 * time.Second,
				Out: &out,
			})
			if err != nil {
				t.Fatalf("seed %d: %v\n%s", seed, err, out.String())
			}
			if s.Violations > 0 || s.Lost > 0 || s.Unknown > 0 || len(s.Errors) > 0 {
				t.Fatalf("seed %d: violations=%d lost=%d unknown=%d errors=%d\n%s", seed, s.Violations, s.Lost, s.Unknown, len(s.Errors), out.String())
			}
			if s.Effects == 0 || s.Kills == 0 {
				t.Fatalf("seed %d: effects=%d kills=%d: the run tested nothing\n%s", seed, s.Effects, s.Kills, out.String())
			}
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var v int
			if err := conn.QueryRow(ctx, `SELECT value FROM `+pgx.Identifier{schemaOf(t, dir), "meta"}.Sanitize()+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != pgledger.SchemaVersion {
				t.Fatalf("the schema's version at the end: %d (%v), want %d", v, err, pgledger.SchemaVersion)
			}
			t.Log(s.Line())
		})
	}
}

// schemaOf is the schema of the run kept in dir (postgres-schema.txt).
func schemaOf(t *testing.T, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "postgres-schema.txt"))
	if err != nil {
		t.Fatalf("the run's schema: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// dropSchemaOf drops the schema of the run kept in dir, if it got one.
func dropSchemaOf(t *testing.T, dsn, dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "postgres-schema.txt"))
	if err != nil {
		return // the run did not get that far
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Errorf("dropping the run's schema: %v", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{strings.TrimSpace(string(b))}.Sanitize()+` CASCADE`); err != nil {
		t.Errorf("dropping schema %s: %v", b, err)
	}
}
