//go:build unix

package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// TestRunNowCommand: 'idem run-now' of a runnable period leaves a wake
// mark for the job (what running Schedulers poll); a done, parked or
// backing-off period is refused, pointing at the command that fits
// (rerun, reset), and leaves none.
func TestRunNowCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	testRunNowCommand(t, e)
	l, err := idem.OpenLedger(e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := idemstore.Of(l)
	if err != nil {
		t.Fatal(err)
	}
	jobs, _, err := st.(idemstore.Waker).Woken(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// settle by run-now; broken by its reset (Resolve marks its job).
	if slices.Sort(jobs); strings.Join(jobs, " ") != "broken settle" {
		t.Errorf("jobs woken: %v, want broken (its reset) and settle (run-now)", jobs)
	}
}

// TestRunNowCommandPostgres is TestRunNowCommand's refusals and request
// on the Postgres ledger.
func TestRunNowCommandPostgres(t *testing.T) {
	t.Parallel()
	dsn, schema := pgSchema(t, "idemcli_")
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}
	testRunNowCommand(t, e)
}

func testRunNowCommand(t *testing.T, e *env) {
	e.want(exitOK, "run", "--job", "settle", "--tz", "UTC", "--since", "2026-10-26", "--", "true")
	_, stderr := e.want(exitFailed, "run-now", "settle", "2026-10-27")
	if !strings.Contains(stderr, "is done") || !strings.Contains(stderr, "idem rerun") {
		t.Errorf("run-now of a done period: %q, want it refused, pointing at idem rerun", stderr)
	}
	if e.pg == nil { // Postgres's backoff is on the server's clock, not on $IDEM_NOW's
		e.idem("run", "--job", "broken", "--tz", "UTC", "--max-attempts", "2", "--", "false")
		_, stderr = e.want(exitFailed, "run-now", "broken", "2026-10-27")
		if !strings.Contains(stderr, "backing off") || !strings.Contains(stderr, "idem reset") {
			t.Errorf("run-now of a period backing off: %q, want it refused, pointing at idem reset", stderr)
		}
		e.want(exitOK, "reset", "broken", "2026-10-27")
	}
	e.idem("run", "--job", "broken", "--tz", "UTC", "--max-attempts", "1", "--", "false")
	_, stderr = e.want(exitFailed, "run-now", "broken", "2026-10-27")
	if !strings.Contains(stderr, "parked") || !strings.Contains(stderr, "idem reset") {
		t.Errorf("run-now of a parked period: %q, want it refused, pointing at idem reset", stderr)
	}
	stdout, _ := e.want(exitOK, "run-now", "settle", "2026-10-28")
	if !strings.Contains(stdout, "asked") {
		t.Errorf("run-now of a period that never ran: %q, want it asked", stdout)
	}
	_, stderr = e.want(exitUsage, "run-now", "settle", "")
	if !strings.Contains(stderr, "period") {
		t.Errorf("run-now of an empty period: %q, want a usage error naming the period", stderr)
	}
}
