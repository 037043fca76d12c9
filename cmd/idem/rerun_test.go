//go:build unix

package main

import (
	"strings"
	"testing"
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
