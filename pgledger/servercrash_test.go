//go:build unix

package pgledger_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// ownServer starts a throwaway PostgreSQL server for t alone
// (scripts/pg.sh start), stopped when t ends, and returns its DSN: a test
// that crashes the server or changes its configuration must not do so under
// the other tests. It is skipped (or fails in CI) as the tests on the
// shared server are.
func ownServer(t *testing.T) string {
	t.Helper()
	testDSN(t)
	out, err := pgScript(t, "start")
	if err != nil {
		t.Fatalf("scripts/pg.sh start: %v\n%s", err, out)
	}
	s := strings.TrimSpace(out)
	dsn := strings.TrimSuffix(strings.TrimPrefix(s, "export "+dsnEnv+"='"), "'")
	if dsn == s || !strings.HasPrefix(dsn, "postgres://") {
		t.Fatalf("scripts/pg.sh start printed %q, not an export of %s", s, dsnEnv)
	}
	t.Cleanup(func() {
		if out, err := pgScript(t, "stop", dsn); err != nil {
			t.Errorf("scripts/pg.sh stop %s: %v\n%s", dsn, err, out)
		}
	})
	return dsn
}

// pgScript runs scripts/pg.sh with args, two minutes at most, and returns
// its standard output (and its standard error, when it fails).
func pgScript(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("../scripts/pg.sh", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return "", err
	}
	if err := testwait.Process(cmd, 2*time.Minute); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// crashServer kills every process of the server at dsn with SIGKILL (what
// its shared memory held, such as WAL not yet written, is lost) and starts
// it again: crash recovery, as after a crash of the server's host that
// left its disk intact.
func crashServer(t *testing.T, dsn string) {
	t.Helper()
	if out, err := pgScript(t, "crash", dsn); err != nil {
		t.Fatalf("scripts/pg.sh crash %s: %v\n%s", dsn, err, out)
	}
}

// TestDoneMarksSurviveServerCrash: with synchronous_commit off as the
// server's default (ALTER SYSTEM), the database's or the role's, every
// done mark a call reported (Run in each mode, RunTx with an outbox
// message, on a pgx pool and on a *sql.DB) and every claim of AtMostOnce
// and TwoPhase whose fn had started is still there after the server is
// SIGKILLed right after the calls returned and restarted. The WAL writer
// sleeps 10 s between its flushes (wal_writer_delay), so a commit that
// did not wait for its WAL flush is lost by the crash every time.
func TestDoneMarksSurviveServerCrash(t *testing.T) {
	dsn := ownServer(t)
	ctx := context.Background()
	admin := func(stmts ...string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	admin(`ALTER SYSTEM SET wal_writer_delay = '10s'`)
	if serverVersion(t, dsn) >= 140000 {
		admin(`ALTER SYSTEM SET recovery_init_sync_method = 'syncfs'`) // a faster restart
	}
	admin(`SELECT pg_reload_conf()`)
	schema := uniqueName("idemcrash_")
	for round, level := range []struct{ name, set, reset string }{
		{"system", `ALTER SYSTEM SET synchronous_commit = off`, `ALTER SYSTEM RESET synchronous_commit`},
		{"database", `ALTER DATABASE idem SET synchronous_commit = off`, `ALTER DATABASE idem RESET synchronous_commit`},
		{"role", `ALTER ROLE app SET synchronous_commit = off`, `ALTER ROLE app RESET synchronous_commit`},
	} {
		t.Run(level.name, func(t *testing.T) {
			admin(level.set, `SELECT pg_reload_conf()`)
			defer admin(level.reset, `SELECT pg_reload_conf()`)
			testDoneMarksSurviveCrash(t, dsn, schema, round)
		})
	}
}

func testDoneMarksSurviveCrash(t *testing.T, dsn, schema string, round int) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// pg_reload_conf only signals: wait until a new session has the setting.
	testwait.Until(t, func() bool {
		var v string
		return pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v) == nil && v == "off"
	}, "a new session with synchronous_commit off")
	sdb, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	l, err := pgledger.New(ctx, pool, pgledger.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	dl, err := pgledger.NewDB(ctx, sdb, pgledger.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}

	period := func(i int) string { return fmt.Sprintf("r%d-%d", round, i) }
	ok := func(context.Context) error { return nil }
	yes := func(context.Context, idem.Key) (bool, error) { return false, nil }
	var done []idem.Key
	var msgs []string
	var msg string // the id of the message a RunTx put
	const per = 3
	for i := range per {
		for _, run := range []struct {
			job string
			run func(key idem.Key) error
		}{
			{"at-least-once", func(key idem.Key) error { return l.Run(ctx, key, ok) }},
			{"at-most-once", func(key idem.Key) error { return l.Run(ctx, key, ok, idem.AtMostOnce()) }},
			{"two-phase", func(key idem.Key) error { return l.Run(ctx, key, ok, idem.TwoPhase(yes)) }},
			{"value", func(key idem.Key) error {
				_, err := idem.RunValueOn(ctx, l, key, func(context.Context) (int, error) { return 7, nil })
				return err
			}},
			{"tx", func(key idem.Key) error {
				return l.RunTx(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
					var err error
					msg, err = outbox.Put(ctx, tx, outbox.Message{Topic: "t", Payload: []byte(key.Period)})
					return err
				})
			}},
			{"db-at-most-once", func(key idem.Key) error { return dl.Run(ctx, key, ok, idem.AtMostOnce()) }},
			{"db-tx", func(key idem.Key) error {
				return dl.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
					var err error
					msg, err = outbox.Put(ctx, tx, outbox.Message{Topic: "t", Payload: []byte(key.Period)})
					return err
				})
			}},
		} {
			key := idem.Key{Job: run.job, Period: period(i)}
			msg = ""
			if err := run.run(key); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			done = append(done, key)
			if msg != "" {
				msgs = append(msgs, msg)
			}
		}
	}

	// Claims whose fn has started when the server crashes: AtMostOnce's
	// and TwoPhase's must be durable before fn starts.
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	var wg sync.WaitGroup
	var claimed []idem.Key
	for _, c := range []struct {
		job  string
		ledg interface {
			Run(context.Context, idem.Key, func(context.Context) error, ...idem.Option) error
		}
		opt idem.Option
	}{{"pending-at-most-once", l, idem.AtMostOnce()}, {"pending-two-phase", l, idem.TwoPhase(yes)}, {"db-pending-at-most-once", dl, idem.AtMostOnce()}} {
		key := idem.Key{Job: c.job, Period: period(0)}
		claimed = append(claimed, key)
		wg.Go(func() {
			_ = c.ledg.Run(ctx, key, func(context.Context) error {
				started <- struct{}{}
				<-release
				return errors.New("after the crash")
			}, c.opt, idem.OneAttempt())
		})
	}
	for range claimed {
		testwait.Recv(t, started, "an AtMostOnce or TwoPhase fn to start")
	}

	crashServer(t, dsn)

	check, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	status := func(key idem.Key) string {
		var s string
		err := check.QueryRow(ctx, `SELECT status FROM `+pgx.Identifier{schema, "runs"}.Sanitize()+` WHERE job = $1 AND period = $2`, key.Job, key.Period).Scan(&s)
		if errors.Is(err, pgx.ErrNoRows) {
			return "no record"
		} else if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return s
	}
	lost := 0
	for _, key := range done {
		if s := status(key); s != "done" {
			lost++
			t.Errorf("%s: %s after the server's crash; its call returned nil before the crash, so it must be done", key, s)
		}
	}
	for _, key := range claimed {
		if s := status(key); s != "running" {
			lost++
			t.Errorf("%s: %s after the server's crash; its claim committed before fn started, so it must be running", key, s)
		}
	}
	var n int
	if err := check.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()+` WHERE id = ANY($1)`, msgs).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(msgs) {
		t.Errorf("%d of the %d outbox messages of the RunTx calls that returned nil are there after the crash", n, len(msgs))
	}
	t.Logf("lost after the crash: %d of %d done marks and claims; %d of %d messages there", lost, len(done)+len(claimed), n, len(msgs))
	close(release)
	testwait.Group(t, &wg, "the Runs whose fn the crash interrupted")
}

// TestDurableCommitTrigger: a statement that writes to any table of the
// ledger raises its transaction's synchronous_commit from off to on (the
// trigger durable_commit is on every table of the schema), unless the
// ledger's own async statements said off (idem.async_commit); a value
// stronger than off stays as it is.
func TestDurableCommitTrigger(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	l := openLedger(t, pool)
	if missing := withoutDurableTrigger(t, pool, l.Schema()); len(missing) > 0 {
		t.Errorf("tables of the ledger without the trigger durable_commit: %v", missing)
	}
	// A version-6 schema (no trigger, no function) gets them from New.
	s := pgx.Identifier{l.Schema()}.Sanitize()
	if _, err := pool.Exec(ctx, `DROP FUNCTION `+s+`.durable_commit() CASCADE`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+s+`.meta SET value = 6 WHERE name = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	if missing := withoutDurableTrigger(t, pool, l.Schema()); len(missing) == 0 {
		t.Fatal("DROP FUNCTION durable_commit CASCADE left its triggers")
	}
	if _, err := pgledger.New(ctx, pool, pgledger.WithSchema(l.Schema())); err != nil {
		t.Fatal(err)
	}
	if missing := withoutDurableTrigger(t, pool, l.Schema()); len(missing) > 0 {
		t.Errorf("tables of a version-6 ledger without the trigger durable_commit after New: %v", missing)
	}
	for _, c := range []struct {
		name, set, want string
	}{
		{"off", `SELECT set_config('synchronous_commit', 'off', true)`, "on"},
		{"async", `SELECT set_config('synchronous_commit', 'off', true), set_config('idem.async_commit', 'on', true)`, "off"},
		{"local", `SELECT set_config('synchronous_commit', 'local', true)`, "local"},
		{"remote_apply", `SELECT set_config('synchronous_commit', 'remote_apply', true)`, "remote_apply"},
	} {
		for _, table := range []string{"runs", "outbox", "item_state", "limit_slots"} {
			var got string
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, c.set); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `DELETE FROM `+pgx.Identifier{l.Schema(), table}.Sanitize()+` WHERE false`); err != nil {
					return err
				}
				return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got)
			})
			if err != nil || got != c.want {
				t.Errorf("%s, then a write to %s: synchronous_commit %q (%v); want %q", c.name, table, got, err, c.want)
			}
		}
	}
}

// TestFsyncOffRefused: New, Open and NewDB refuse a server that runs with
// fsync off with an error matching ErrWeakDurability that names the
// setting, having written nothing; AllowWeakDurability accepts it.
func TestFsyncOffRefused(t *testing.T) {
	dsn := ownServer(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `ALTER SYSTEM SET fsync = off`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, func() bool {
		var v string
		return pool.QueryRow(ctx, `SHOW fsync`).Scan(&v) == nil && v == "off"
	}, "the server to run with fsync off")
	sdb, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	schema := uniqueName("idemfsync_")
	opens := []struct {
		name string
		open func(opts ...pgledger.Option) error
	}{
		{"New", func(opts ...pgledger.Option) error { _, err := pgledger.New(ctx, pool, opts...); return err }},
		{"Open", func(opts ...pgledger.Option) error {
			l, err := pgledger.Open(ctx, dsn, opts...)
			if err == nil {
				l.Close()
			}
			return err
		}},
		{"NewDB", func(opts ...pgledger.Option) error { _, err := pgledger.NewDB(ctx, sdb, opts...); return err }},
	}
	for _, o := range opens {
		err := o.open(pgledger.WithSchema(schema))
		if !errors.Is(err, pgledger.ErrWeakDurability) || !strings.Contains(err.Error(), "fsync off") ||
			!strings.Contains(err.Error(), "AllowWeakDurability") {
			t.Errorf("%s on a server with fsync off: %v; want ErrWeakDurability naming fsync off and AllowWeakDurability", o.name, err)
		}
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil || exists {
			t.Fatalf("%s refused the server but created schema %s (%v)", o.name, schema, err)
		}
	}
	for _, o := range opens {
		if err := o.open(pgledger.WithSchema(schema), pgledger.AllowWeakDurability()); err != nil {
			t.Errorf("%s with AllowWeakDurability on a server with fsync off: %v", o.name, err)
		}
	}
}

// withoutDurableTrigger returns the tables of schema that have no enabled
// trigger durable_commit.
func withoutDurableTrigger(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT c.relname::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND NOT EXISTS (
			SELECT 1 FROM pg_trigger AS g WHERE g.tgrelid = c.oid AND g.tgname = 'durable_commit' AND g.tgenabled = 'O')
		ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return missing
}

// serverVersion returns the server_version_num of the server at dsn.
func serverVersion(t *testing.T, dsn string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
