package pgledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// startupProcs is how many processes TestReplicasStartTogether starts.
const startupProcs = 12

// startupChild is one replica of TestReplicasStartTogether: it connects
// (ctor "New": a pgx pool and New; "NewDB/<driver>": NewDB on a *sql.DB of
// that database/sql driver), runs the application's own migrations first (a
// CREATE TABLE IF NOT EXISTS of its business table), waits at the barrier
// (the file go in dir) and attaches the ledger in schema, then records a
// done mark through it.
func startupChild(schema, dir, ctor, app string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := os.Getenv(dsnEnv)
	var exec func(q string) error
	var attach func() (schemaLedger, error)
	if ctor == "New" {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		defer pool.Close()
		exec = func(q string) error { _, err := pool.Exec(ctx, q); return err }
		attach = func() (schemaLedger, error) { return pgledger.New(ctx, pool, pgledger.WithSchema(schema)) }
	} else {
		db, err := sql.Open(strings.TrimPrefix(ctor, "NewDB/"), dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		exec = func(q string) error { _, err := db.ExecContext(ctx, q); return err }
		attach = func() (schemaLedger, error) { return pgledger.NewDB(ctx, db, pgledger.WithSchema(schema)) }
	}
	// The application's migrations, on the connection the ledger will use.
	if err := exec(`CREATE TABLE IF NOT EXISTS ` + app + ` (id bigint PRIMARY KEY, amount bigint NOT NULL)`); err != nil {
		return fmt.Errorf("the application's DDL: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready-"+app), nil, 0o644); err != nil {
		return err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
			break
		}
		if ctx.Err() != nil {
			return errors.New("the barrier (file go) never opened")
		}
		time.Sleep(time.Millisecond)
	}
	l, err := attach()
	if err != nil {
		return fmt.Errorf("%s constructor: %w", ctor, err)
	}
	if err := execIn(ctx, l, `INSERT INTO `+app+` VALUES (1, 1)`); err != nil {
		return err
	}
	return nil
}

// TestReplicasStartTogether: 12 processes (this test binary, re-executed),
// each with a connection of its own that has already run the application's
// own CREATE TABLE IF NOT EXISTS, attach a ledger to the same empty schema
// at the same moment, half through New (pgx) and half through NewDB (pgx's
// stdlib). Every one must succeed, as the doc promises: any number of
// processes may start at once.
func TestReplicasStartTogether(t *testing.T) {
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(arg string) { // does not return
			f := strings.Split(arg, "|")
			if err := startupChild(f[0], f[1], f[2], f[3]); err != nil {
				fmt.Println(err)
				os.Exit(3)
			}
		})
	}
	pool := newPool(t)
	ctx := context.Background()
	schema := uniqueName("idemstart_")
	appSchema := uniqueName("idemapp_")
	dropSchemaLater(t, pool, schema)
	dropSchemaLater(t, pool, appSchema)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+appSchema); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctors := []string{"New", "NewDB/pgx"}
	var children []*idemtest.Child
	for i := range startupProcs {
		app := appSchema + ".settlements_" + strconv.Itoa(i)
		children = append(children, idemtest.Start(t, strings.Join([]string{schema, dir, ctors[i%len(ctors)], app}, "|"), nil))
	}
	testwait.Until(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "ready-*"))
		return len(m) == startupProcs
	}, "all %d processes to run their own DDL", startupProcs)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, c := range children {
		if e := c.Wait(); e.Killed || e.Code != 0 {
			t.Errorf("process %d (%s): exit %+v", i, ctors[i%len(ctors)], e)
		}
	}
	var v int64
	if err := pool.QueryRow(ctx, `SELECT value FROM `+pgx.Identifier{schema, "meta"}.Sanitize()+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != pgledger.SchemaVersion {
		t.Errorf("schema version: %d, %v; want %d", v, err, pgledger.SchemaVersion)
	}
}

// TestNewAfterForeignCreateSchema: another program creates the ledger's
// schema outside the ledger's lock (its own migration, say), and commits
// while New's CREATE SCHEMA IF NOT EXISTS waits for it, which then fails
// with a unique violation on pg_namespace. New retries in a fresh
// transaction, which sees the schema, and succeeds.
func TestNewAfterForeignCreateSchema(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := uniqueName("idemforeign_")
	dropSchemaLater(t, pool, schema)
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := pgledger.New(ctx, newPool(t), pgledger.WithSchema(schema))
		if err == nil {
			l.Close()
		}
		done <- err
	}()
	testwait.Until(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%CREATE SCHEMA IF NOT EXISTS "`+schema+`"%'`).Scan(&n)
		return err == nil && n > 0
	}, "New's CREATE SCHEMA of %s to wait for the other transaction's", schema)
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, done, "New on %s", schema); err != nil {
		t.Fatalf("New after a concurrent CREATE SCHEMA of %s: %v", schema, err)
	}
}
