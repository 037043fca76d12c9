package mysqlledger_test

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

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/mysqlledger"
)

// startupProcs is how many processes TestReplicasStartTogether starts.
const startupProcs = 24

// startupChild is one replica of TestReplicasStartTogether: it connects,
// runs the application's own migration (a CREATE TABLE IF NOT EXISTS of
// its business table), waits at the barrier (the file go in dir), attaches
// the ledger with prefix, and runs a RunTx that writes a business row.
func startupChild(prefix, dir, app string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", os.Getenv(dsnEnv))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+app+` (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL)`); err != nil {
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
	l, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(prefix))
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	return l.RunTx(ctx, idem.Key{Job: "start-" + app, Period: "2026-12-05"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+app+` VALUES (1, 1)`)
		return err
	})
}

// TestReplicasStartTogether: 24 processes (this test binary, re-executed),
// each with a connection that has already run the application's own DDL,
// attach a ledger to the same empty database prefix at the same moment.
// Every one must succeed: any number of processes may start at once.
func TestReplicasStartTogether(t *testing.T) {
	if idemtest.IsChild(t) {
		idemtest.Start(t, "", func(arg string) { // does not return
			f := strings.Split(arg, "|")
			if err := startupChild(f[0], f[1], f[2]); err != nil {
				fmt.Println(err)
				os.Exit(3)
			}
		})
	}
	db := openDB(t)
	prefix := uniqueName("start")
	dropLater(t, prefix)
	dir := t.TempDir()
	var children []*idemtest.Child
	var apps []string
	for i := range startupProcs {
		app := prefix + "app_" + strconv.Itoa(i)
		apps = append(apps, app)
		children = append(children, idemtest.Start(t, strings.Join([]string{prefix, dir, app}, "|"), nil))
	}
	t.Cleanup(func() { db.Exec(`DROP TABLE IF EXISTS ` + strings.Join(apps, ", ")) })
	testwait.Until(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "ready-*"))
		return len(m) == startupProcs
	}, "all %d processes to run their own DDL", startupProcs)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fails := 0
	for i, c := range children {
		if e := c.Wait(); e.Killed || e.Code != 0 {
			fails++
			t.Errorf("process %d: exit %+v", i, e)
		}
	}
	t.Logf("%d processes started together on an empty database: %d failed", startupProcs, fails)
	var v int
	if err := db.QueryRow("SELECT version FROM `" + prefix + "meta` WHERE name = 'schema'").Scan(&v); err != nil || v != mysqlledger.SchemaVersion {
		t.Errorf("schema version: %d, %v; want %d", v, err, mysqlledger.SchemaVersion)
	}
	var done int
	if err := db.QueryRow("SELECT count(*) FROM `" + prefix + "runs` WHERE status = 'done'").Scan(&done); err != nil || done != startupProcs {
		t.Errorf("%d keys done (%v); want %d", done, err, startupProcs)
	}
}

// TestNewerSchemaRefused: a schema one version newer is used; two newer is
// refused with idem.ErrNewerSchema, and nothing is written.
func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	l := openLedger(t, db)
	set := func(v int) {
		t.Helper()
		if _, err := db.Exec(`UPDATE `+l.Table("meta")+` SET version = ? WHERE name = 'schema'`, v); err != nil {
			t.Fatal(err)
		}
	}
	set(mysqlledger.SchemaVersion + 1)
	if _, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(l.Prefix())); err != nil {
		t.Fatalf("a schema one version newer: %v", err)
	}
	set(mysqlledger.SchemaVersion + 2)
	if _, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(l.Prefix())); !errors.Is(err, idem.ErrNewerSchema) {
		t.Fatalf("a schema two versions newer: %v; want ErrNewerSchema", err)
	}
	var v int
	if err := db.QueryRow(`SELECT version FROM ` + l.Table("meta")).Scan(&v); err != nil || v != mysqlledger.SchemaVersion+2 {
		t.Fatalf("version %d, %v: rewritten", v, err)
	}
}

// TestWeakDurabilityRefused: a server that does not flush each commit
// (innodb_flush_log_at_trx_commit=2) is refused with ErrWeakDurability,
// unless AllowWeakDurability. The server is a throwaway one of the test's
// own (ownServer): the variable is global, and on the server the other
// tests share it made their ledgers refused meanwhile (the idem command's
// --mysql test failed so, its module's tests running beside this one's).
func TestWeakDurabilityRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server of its own")
	}
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("mysql", ownServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var was int
	if err := db.QueryRow(`SELECT @@GLOBAL.innodb_flush_log_at_trx_commit`).Scan(&was); err != nil {
		t.Fatal(err)
	}
	if was != 1 {
		t.Fatalf("the test server runs with innodb_flush_log_at_trx_commit=%d; scripts/mysql.sh sets 1", was)
	}
	l := openLedger(t, db) // accepted as it is
	if _, err := db.Exec(`SET GLOBAL innodb_flush_log_at_trx_commit = 2`); err != nil {
		t.Fatalf("SET GLOBAL innodb_flush_log_at_trx_commit = 2 on the test's own server: %v", err)
	}
	_, err = mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(l.Prefix()))
	if !errors.Is(err, mysqlledger.ErrWeakDurability) {
		t.Fatalf("New on a server with innodb_flush_log_at_trx_commit=2: %v; want ErrWeakDurability", err)
	}
	t.Log(err)
	if _, err := mysqlledger.New(ctx, db, mysqlledger.WithTablePrefix(l.Prefix()), mysqlledger.AllowWeakDurability()); err != nil {
		t.Fatalf("with AllowWeakDurability: %v", err)
	}
}
