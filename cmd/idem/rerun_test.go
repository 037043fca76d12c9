//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRerunCommand: 'idem rerun' gives done periods a new revision; the
// next 'idem run' of each runs the command once more, with
// $IDEM_REVISION 1 and a new $IDEM_REQUEST_ID; the same request sent
// again re-runs nothing more; a period that never ran is refused, with
// nothing changed; 'idem reset' of a done period points to rerun.
func TestRerunCommand(t *testing.T) {
	t.Parallel()
	testRerunCommand(t, newEnv(t, "2026-10-28T02:00:00Z"))
}

// TestRerunCommandPostgres is TestRerunCommand on the Postgres ledger
// ($IDEM_TEST_PG_DSN), in a schema of its own: idem rerun --postgres, and
// idem run --postgres running the re-runs behind the job's cursor.
func TestRerunCommandPostgres(t *testing.T) {
	t.Parallel()
	dsn, schema := pgSchema(t, "idemcli_")
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}
	testRerunCommand(t, e)
}

// TestRerunCommandRedis is TestRerunCommand on the Redis store
// ($IDEM_TEST_REDIS_ADDR), under a prefix of its own: idem rerun --redis,
// and idem run --redis running the re-runs behind the job's cursor.
func TestRerunCommandRedis(t *testing.T) {
	t.Parallel()
	addr := redisAddr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemcli-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		keys, err := c.Keys(ctx, "{"+prefix+"}:*").Result()
		if err == nil && len(keys) > 0 {
			err = c.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("deleting the keys of %s: %v", prefix, err)
		}
	})
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--redis", addr, "--redis-prefix", prefix}
	testRerunCommand(t, e)
}

// TestRerunCommandMySQL is TestRerunCommand on the MySQL ledger
// ($IDEM_TEST_MYSQL_DSN), in tables of their own: idem rerun --mysql, and
// idem run --mysql running the re-runs behind the job's cursor.
func TestRerunCommandMySQL(t *testing.T) {
	t.Parallel()
	dsn := mysqlDSN(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	prefix := "idemcli_" + hex.EncodeToString(b[:]) + "_"
	t.Cleanup(func() {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer db.Close()
		var names []string
		for _, n := range []string{"meta", "runs", "jobs", "itemsets", "item_set", "item_chunks", "item_lists", "item_state",
			"outbox", "outbox_topics", "limit_rates", "limit_slots", "reruns"} {
			names = append(names, "`"+prefix+n+"`")
		}
		if _, err := db.Exec(`DROP TABLE IF EXISTS ` + strings.Join(names, ", ")); err != nil {
			t.Errorf("dropping the tables of %s: %v", prefix, err)
		}
	})
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--mysql", dsn, "--mysql-prefix", prefix}
	testRerunCommand(t, e)
}

func testRerunCommand(t *testing.T, e *env) {
	line := []string{"--", "sh", "-c", `echo "$IDEM_PERIOD $IDEM_REVISION $IDEM_REQUEST_ID" >> out.txt`}
	run := func(code int, extra ...string) {
		t.Helper()
		e.want(code, append(append([]string{"run", "--job", "settle", "--tz", "UTC"}, extra...), line...)...)
	}
	run(exitOK, "--since", "2026-10-26")
	run(exitDone)
	_, stderr := e.want(exitFailed, "reset", "settle", "2026-10-27")
	if !strings.Contains(stderr, "idem rerun") {
		t.Errorf("reset of a done period: %q, want a pointer to idem rerun", stderr)
	}
	_, stderr = e.want(exitFailed, "rerun", "settle", "--period", "2026-10-27", "--period", "2026-10-20", "--reason", "x")
	if !strings.Contains(stderr, "never ran") || !strings.Contains(stderr, "2026-10-20") {
		t.Errorf("rerun naming a period that never ran: %q, want it refused, naming the period", stderr)
	}
	req := []string{"rerun", "settle", "--from", "2026-10-26", "--to", "2026-10-27", "--reason", "flow table corrected"}
	stdout, _ := e.want(exitOK, req...)
	if !strings.Contains(stdout, "2 queued") {
		t.Errorf("rerun: %q, want 2 periods queued", stdout)
	}
	run(exitOK) // the next trigger runs both, behind the job's cursor
	run(exitDone)
	stdout, _ = e.want(exitOK, req...) // a retrying script
	if !strings.Contains(stdout, "2 seen before") {
		t.Errorf("the same rerun again: %q, want both seen before", stdout)
	}
	run(exitDone)
	if stdout, _ := e.want(exitOK, "show", "settle", "2026-10-27", "--json"); !strings.Contains(stdout, `"revision": 1`) {
		t.Errorf("idem show --json after the re-run: %s, want revision 1", stdout)
	}
	got := e.lines("out.txt")
	if len(got) != 4 {
		t.Fatalf("out.txt = %q, want 4 runs (two periods, each run once and re-run once)", got)
	}
	for i, want := range []string{"2026-10-26 0", "2026-10-27 0", "2026-10-26 1", "2026-10-27 1"} {
		if !strings.HasPrefix(got[i], want+" idem-") {
			t.Errorf("run %d: %q, want %q and a request id", i, got[i], want)
		}
	}
	if id := func(s string) string { return s[strings.LastIndex(s, " ")+1:] }; id(got[1]) == id(got[3]) {
		t.Errorf("the re-run had the first run's request id %s", id(got[1]))
	}
}

// TestRerunCommandWithDependents: 'idem rerun --with-dependents' re-runs
// the mail of the days re-run and the month's report, whose jobs the
// crontab file (or --dependent lines) declares; 'idem run --after' of the
// mail waits (exit 4, nothing started) until settle's re-run has run,
// then runs the mail once more; the same request sent again re-runs
// nothing; bad declarations are usage errors.
func TestRerunCommandWithDependents(t *testing.T) {
	t.Parallel()
	testRerunCommandWithDependents(t, newEnv(t, "2026-11-01T02:00:00Z"))
}

// TestRerunCommandWithDependentsPostgres is
// TestRerunCommandWithDependents on the Postgres ledger.
func TestRerunCommandWithDependentsPostgres(t *testing.T) {
	t.Parallel()
	dsn, schema := pgSchema(t, "idemcli_")
	e := newEnv(t, "2026-11-01T02:00:00Z")
	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}
	testRerunCommandWithDependents(t, e)
}

func testRerunCommandWithDependents(t *testing.T, e *env) {
	job := func(name string, extra ...string) []string {
		args := append([]string{"run", "--job", name, "--tz", "UTC", "--since", "2026-10-30"}, extra...)
		return append(args, "--", "sh", "-c", `echo "$IDEM_JOB $IDEM_PERIOD $IDEM_REVISION" >> out.txt`)
	}
	settle, mail := job("settle"), job("mail", "--after", "settle")
	report := job("report", "--schedule", "monthly", "--after", "settle/daily")
	report[6] = "2026-10-01" // its month's first day
	e.want(exitOK, settle...)
	e.want(exitOK, mail...)
	e.want(exitOK, report...)
	if err := os.WriteFile(filepath.Join(e.dir, "crontab"), []byte("daily settle true\ndaily mail after:settle true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := []string{"rerun", "settle", "--period", "2026-10-31", "--reason", "flow table corrected", "--with-dependents",
		"--crontab", "crontab", "--dependent", "monthly report after:settle/daily", "--tz", "UTC"}
	stdout, _ := e.want(exitOK, req...)
	for _, want := range []string{"settle 2026-10-31: revision 1, queued", "mail 2026-10-31: revision 1, queued", "report 2026-10: revision 1, queued", "3 periods: 3 queued"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("rerun --with-dependents: %q, want %q", stdout, want)
		}
	}
	_, stderr := e.want(exitBusy, mail...)
	if !strings.Contains(stderr, "settle/2026-10-31") {
		t.Errorf("the mail before settle's re-run: %q, want it waiting for settle/2026-10-31", stderr)
	}
	e.want(exitBusy, report...)
	e.want(exitOK, settle...)
	e.want(exitOK, mail...)
	e.want(exitOK, report...)
	if stdout, _ := e.want(exitOK, req...); !strings.Contains(stdout, "3 seen before") {
		t.Errorf("the same request again: %q, want 3 seen before", stdout)
	}
	e.want(exitDone, mail...)
	want := []string{"settle 2026-10-30 0", "settle 2026-10-31 0", "mail 2026-10-30 0", "mail 2026-10-31 0", "report 2026-10 0",
		"settle 2026-10-31 1", "mail 2026-10-31 1", "report 2026-10 1"}
	if got := e.lines("out.txt"); !equal(got, want) {
		t.Errorf("out.txt = %q, want %q", got, want)
	}
	for _, bad := range [][]string{
		{"--with-dependents"}, // no declarations
		{"--crontab", "crontab"},
		{"--with-dependents", "--dependent", "fortnightly mail"},
		{"--with-dependents", "--dependent", "daily mail after:settle", "--dependent", "daily mail after:settle"},
		{"--with-dependents", "--crontab", "nothere"},
	} {
		_, stderr := e.want(exitUsage, append([]string{"rerun", "settle", "--period", "2026-10-31", "--reason", "x"}, bad...)...)
		if stderr == "" {
			t.Errorf("%q: no message", bad)
		}
	}
}
