package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/internal/torture/harness"
)

// TestMain registers the mysql backend, and makes the test binary a worker
// when a run re-executes it.
func TestMain(m *testing.M) {
	harness.Register(mysqlBackend())
	if harness.IsWorker() {
		os.Exit(harness.RunWorker())
	}
	os.Exit(m.Run())
}

// TestTortureMySQL runs a short kill -9 pass of every mode against the
// MySQL ledger (the MariaDB that scripts/test.sh starts).
func TestTortureMySQL(t *testing.T) {
	harness.ShortRuns(t, "mysql", dsnEnv, "MariaDB", []string{"atleastonce", "atmostonce", "twophase", "tx", "outbox"})
}

// TestNoDatabase: without a database, -store mysql is a usage error that
// names the flag.
func TestNoDatabase(t *testing.T) {
	t.Setenv(dsnEnv, "")
	var stdout, stderr bytes.Buffer
	if got := harness.Main([]string{"-store", "mysql", "-kills", "1"}, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "-mysql-dsn") {
		t.Fatalf("status %d, stderr:\n%s", got, stderr.String())
	}
}

// TestTortureMySQLServerCrash: a kill -9 pass of the tx mode (RunTx, a
// business row that is NOT idempotent) while the server itself is
// SIGKILLed and restarted twice (scripts/mysql.sh crash: crash recovery
// from its redo log), on a server of its own: every key done, its row
// written once, none lost.
func TestTortureMySQLServerCrash(t *testing.T) {
	if os.Getenv(dsnEnv) == "" { // no MariaDB here, so none to start either
		if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
			t.Fatalf("%s is not set, and CI must run the mysql tests: run scripts/test.sh (it starts MariaDB)", dsnEnv)
		}
		t.Skipf("no MariaDB: run scripts/test.sh (it starts a throwaway server), or set %s", dsnEnv)
	}
	if testing.Short() {
		t.Skip("starts and crashes a server of its own")
	}
	out, err := mysqlScript(t, "start")
	if err != nil {
		t.Fatalf("scripts/mysql.sh start: %v\n%s", err, out)
	}
	s := strings.TrimSpace(out)
	dsn, ok := strings.CutPrefix(s, "export "+dsnEnv+"=")
	if !ok {
		t.Fatalf("scripts/mysql.sh start printed %q, not an export of %s", s, dsnEnv)
	}
	dsn = strings.Trim(dsn, "'")
	t.Cleanup(func() {
		if out, err := mysqlScript(t, "stop", dsn); err != nil {
			t.Errorf("scripts/mysql.sh stop %s: %v\n%s", dsn, err, out)
		}
	})
	t.Setenv(dsnEnv, dsn)
	// The server is crashed 1 s and 2.5 s into the kill phase, while the
	// workers (2,000 keys: several seconds of work) run.
	crashes := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		n := 0
		for _, at := range []time.Duration{time.Second, 1500 * time.Millisecond} {
			select {
			case <-ctx.Done():
				crashes <- fmt.Errorf("the run ended after %d of the 2 crashes of the server: give it more keys", n)
				return
			case <-time.After(at):
			}
			if out, err := mysqlScript(t, "crash", dsn); err != nil {
				crashes <- fmt.Errorf("scripts/mysql.sh crash (%d of 2): %v\n%s", n+1, err, out)
				return
			}
			n++
		}
		crashes <- nil
	}()
	var report bytes.Buffer
	seed := time.Now().UnixNano()
	sum, err := harness.Run(harness.Config{
		Store: "mysql", Mode: "tx",
		Kills: 20, Keys: 2000, Workers: 3,
		Seed: seed, Duration: 20 * time.Second, Settle: 2 * time.Minute,
		Lease: time.Second, Stall: time.Minute,
		Out: &report,
	})
	cancel()
	if cerr := testwait.Recv(t, crashes, "the server's crashes to end"); cerr != nil {
		t.Fatalf("%v\n%s", cerr, report.String())
	}
	if err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, report.String())
	}
	if sum.Violations > 0 || sum.Lost > 0 || len(sum.Errors) > 0 || sum.Effects != 2000 {
		t.Fatalf("seed %d: violations=%d lost=%d errors=%d effects=%d (want 2000)\n%s", seed, sum.Violations, sum.Lost, len(sum.Errors), sum.Effects, report.String())
	}
	t.Log(sum.Line())
}

// mysqlScript runs scripts/mysql.sh with args, two minutes at most.
func mysqlScript(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("../../../scripts/mysql.sh", args...)
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
