//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// mysqlDSN is the test MariaDB's DSN ($IDEM_TEST_MYSQL_DSN: scripts/test.sh
// starts one with scripts/mysql.sh); without it the test is skipped, except
// in CI.
func mysqlDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_MYSQL_DSN")
	if dsn == "" {
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatal("IDEM_TEST_MYSQL_DSN is not set, and CI must run the MySQL tests: run scripts/test.sh")
		}
		t.Skip("no MySQL: set IDEM_TEST_MYSQL_DSN (eval \"$(scripts/mysql.sh start)\" from the repository's root)")
	}
	return dsn
}

// TestMySQLLedgerCLI: --mysql DSN (or $IDEM_MYSQL) puts the ledger in
// MySQL or MariaDB for run, ls, show, resolve and prune, in tables named
// by --mysql-prefix, and doctor reads it; a DSN that does not parse, an
// unreachable server, a bad prefix or two stores named at once are usage
// errors.
func TestMySQLLedgerCLI(t *testing.T) {
	t.Parallel()
	dsn := mysqlDSN(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	prefix := "idemcli_" + hex.EncodeToString(b[:]) + "_"
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, p := range []string{prefix, prefix + "other_"} {
			rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
				WHERE table_schema = DATABASE() AND table_name LIKE ?`, strings.ReplaceAll(p, "_", `\_`)+"%")
			if err != nil {
				t.Errorf("listing the tables of %s: %v", p, err)
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
				if _, err := db.ExecContext(ctx, `DROP TABLE `+strings.Join(names, ", ")); err != nil {
					t.Errorf("dropping the tables of %s: %v", p, err)
				}
			}
		}
		db.Close()
	})
	status := func(job, period string) string {
		t.Helper()
		var s string
		err := db.QueryRow("SELECT status FROM `"+prefix+"runs` WHERE job = ? AND period = ?", job, period).Scan(&s)
		if err == sql.ErrNoRows {
			return "(none)"
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--mysql", dsn, "--mysql-prefix", prefix}
	e.want(exitOK, runArgs()...)
	e.want(exitDone, runArgs()...)
	if got, want := e.lines("out.txt"), []string{"2026-10-27 1"}; !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
	if _, err := os.Stat(e.ledger); !os.IsNotExist(err) {
		t.Fatalf("a SQLite ledger was created at %s with --mysql: %v", e.ledger, err)
	}
	if got := status("settle", "2026-10-27"); got != "done" {
		t.Fatalf("the period's record in MySQL: %s, want done", got)
	}
	if out, _ := e.want(exitOK, "ls"); !strings.Contains(out, "settle") || !strings.Contains(out, "2026-10-27") || !strings.Contains(out, "done") {
		t.Fatalf("ls --mysql:\n%s", out)
	}
	if out, _ := e.want(exitOK, "show", "settle", "2026-10-27"); !strings.Contains(out, "done") {
		t.Fatalf("show --mysql:\n%s", out)
	}
	// An at-most-once attempt that failed is unknown; resolve --retry lets
	// it run again, through $IDEM_MYSQL this time.
	e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "sh", "-c", `echo "pay $IDEM_ATTEMPT" >> out.txt; exit 1`)
	if _, stderr := e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "true"); !strings.Contains(stderr, "--mysql DSN") {
		t.Errorf("the unknown period's advice does not repeat --mysql: %q", stderr)
	}
	if got := status("pay", "2026-10-27"); got != "unknown" {
		t.Fatalf("the failed at-most-once period in MySQL: %s, want unknown", got)
	}
	e.want(exitOK, "resolve", "pay", "2026-10-27", "--retry")
	cmd := e.command("run", "--mysql-prefix", prefix, "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--",
		"sh", "-c", `echo "pay $IDEM_ATTEMPT" >> out.txt`)
	cmd.Env = append(cmd.Env, EnvMySQL+"="+dsn)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run with $%s: %v\n%s", EnvMySQL, err, out)
	}
	if got, want := e.lines("out.txt"), []string{"2026-10-27 1", "pay 1", "pay 2"}; !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
	// run-now leaves a wake mark (the Schedulers run the period at once).
	e.want(exitOK, "run-now", "report", "2026-10-27")
	var marks int
	if err := db.QueryRow("SELECT COUNT(*) FROM `" + prefix + "wakes` WHERE job = 'report'").Scan(&marks); err != nil || marks != 1 {
		t.Fatalf("wake marks of report after run-now: %d, %v; want 1", marks, err)
	}
	// prune deletes the done record; the period stays done (the horizon).
	e.want(exitOK, "prune", "--job", "settle", "--through", "2026-10-27")
	if got := status("settle", "2026-10-27"); got != "(none)" {
		t.Fatalf("the pruned record in MySQL: %s, want none", got)
	}
	e.want(exitDone, runArgs()...)
	// Another prefix is another ledger.
	if _, stderr := e.want(exitOK, "ls", "--mysql-prefix", prefix+"other_"); !strings.Contains(stderr, "no") {
		t.Errorf("ls of an empty ledger: %q", stderr)
	}

	// doctor reads the ledger: the at-most-once period that failed is
	// unknown and needs a person (exit 0: a warning); a prefix with no
	// ledger is a warning too; an unreachable server is an error (exit 1).
	e.want(exitUnknown, "run", "--job", "wire", "--tz", "UTC", "--mode", "at-most-once", "--", "false")
	out, _ := e.want(exitOK, "doctor", "--mysql", dsn, "--mysql-prefix", prefix)
	for _, want := range []string{"durability", "mysqlledger tables with prefix " + prefix, "1 unknown", "--mysql DSN --mysql-prefix"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor --mysql: no %q in:\n%s", want, out)
		}
	}
	if out, _ := e.want(exitOK, "doctor", "--mysql", dsn, "--mysql-prefix", prefix+"none_"); !strings.Contains(out, "no ledger with prefix") {
		t.Errorf("doctor --mysql of a prefix with no ledger:\n%s", out)
	}

	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = "127.0.0.1:1" // nothing listens there
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", "--mysql", "not a dsn"}, "mysql"},
		{[]string{"ls", "--mysql", cfg.FormatDSN()}, "127.0.0.1:1"},
		{[]string{"ls", "--mysql", dsn, "--mysql-allow-weak-durability", "--mysql-prefix", "bad-prefix"}, "WithTablePrefix"},
		{[]string{"ls", "--mysql", dsn, "--ledger", e.ledger}, "mysql"},
	} {
		e2 := newEnv(t, "")
		cmd := e2.command(c.args...)
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), c.want) {
			t.Errorf("idem %s: exit %d (%v), want %d and an error naming %q:\n%s", strings.Join(c.args, " "), code, err, exitUsage, c.want, out)
		}
	}
	cmd = e.command("doctor", "--mysql", cfg.FormatDSN())
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "cannot connect") {
		t.Errorf("doctor --mysql of an unreachable server: exit %d, want 1:\n%s", cmd.ProcessState.ExitCode(), out)
	}
	cmd = e.command("ls")
	cmd.Env = append(cmd.Env, EnvMySQL+"="+dsn, EnvPostgres+"=postgres://localhost/x")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "$"+EnvMySQL) {
		t.Errorf("ls with $%s and $%s set: exit %d:\n%s", EnvPostgres, EnvMySQL, cmd.ProcessState.ExitCode(), out)
	}
}
