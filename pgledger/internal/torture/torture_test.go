package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/torture/harness"
)

// TestMain registers the postgres backend, and makes the test binary a
// worker when a run re-executes it.
func TestMain(m *testing.M) {
	harness.Register(postgresBackend())
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(m.Run())
}

// TestTorturePostgres runs a short kill -9 pass of every mode against the
// Postgres ledger.
func TestTorturePostgres(t *testing.T) {
	harness.ShortRuns(t, "postgres", dsnEnv, "PostgreSQL", []string{"atleastonce", "atmostonce", "twophase", "tx", "outbox"})
}

// TestNoDatabase: without a database, -store postgres is a usage error.
func TestNoDatabase(t *testing.T) {
	t.Setenv(dsnEnv, "")
	var stdout, stderr bytes.Buffer
	if got := harness.Main([]string{"-store", "postgres", "-kills", "1"}, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "-pg-dsn") {
		t.Fatalf("status %d, stderr:\n%s", got, stderr.String())
	}
}

// TestTorturePostgresSQL runs a short kill -9 pass of the tx mode with the
// workers' ledgers on a *sql.DB (-pg-conn sql: pgledger.NewDB, RunTx with
// *sql.Tx), through the command's flags. The kill phase ends at -kills or
// when the workers have finished, whichever comes first, so the number of
// kills is not fixed: at least one (200 keys keep the workers busy well
// past the first kill, at most 50 ms after they start), at most -kills.
// What is fixed is the outcome: every key done, none lost, none applied
// twice.
func TestTorturePostgresSQL(t *testing.T) {
	if os.Getenv(dsnEnv) == "" {
		t.Skipf("no PostgreSQL: set %s=postgres://...", dsnEnv)
	}
	// Main registers the backend's flags again, which puts -pg-conn back
	// to its default for the tests that call harness.Run directly.
	t.Cleanup(func() { harness.Main([]string{"-h"}, io.Discard, io.Discard) })
	var stdout, stderr bytes.Buffer
	args := []string{"-store", "postgres", "-pg-conn", "sql", "-mode", "tx", "-kills", "10", "-keys", "200", "-workers", "3", "-duration", "10s"}
	if got := harness.Main(args, &stdout, &stderr); got != 0 {
		t.Fatalf("torture %s: status %d\n%s\n%s", strings.Join(args, " "), got, stdout.String(), stderr.String())
	}
	out := strings.TrimSpace(stdout.String())
	last := out[strings.LastIndex(out, "\n")+1:]
	m := regexp.MustCompile(`^torture: store=postgres mode=tx kills=(\d+) keys=200 effects=200 duplicates=0 lost=0 unknown=0 violations=0$`).FindStringSubmatch(last)
	if m == nil || !strings.Contains(out, "*sql.DB (pgx stdlib driver) per worker process") {
		t.Fatalf("last line %q, want every key applied once; report:\n%s", last, out)
	}
	if kills, _ := strconv.Atoi(m[1]); kills < 1 || kills > 10 {
		t.Fatalf("%d kills, want 1 to 10; report:\n%s", kills, out)
	}
	t.Log(last)
}

// TestBadConn: -pg-conn names a connection that does not exist: a usage
// error naming the flag.
func TestBadConn(t *testing.T) {
	if os.Getenv(dsnEnv) == "" {
		t.Skipf("no PostgreSQL: set %s=postgres://...", dsnEnv)
	}
	var stdout, stderr bytes.Buffer
	got := harness.Main([]string{"-store", "postgres", "-pg-conn", "odbc", "-kills", "1"}, &stdout, &stderr)
	if got != 2 || !strings.Contains(stderr.String(), `-pg-conn "odbc"`) {
		t.Fatalf("status %d, stderr:\n%s", got, stderr.String())
	}
}
