//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestShowHistory: idem show prints each revision of a period (the first
// run, then each re-run with who asked, why and when) and the attempts
// that ran it (outcome, error, owner, times); show --json gives the same
// as "history".
func TestShowHistory(t *testing.T) {
	t.Parallel()
	testShowHistory(t, newEnv(t, "2026-10-28T02:00:00Z"))
}

// TestShowHistoryPostgres is TestShowHistory on the Postgres ledger
// ($IDEM_TEST_PG_DSN), in a schema of its own.
func TestShowHistoryPostgres(t *testing.T) {
	t.Parallel()
	dsn, schema := pgSchema(t, "idemcli_")
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}
	testShowHistory(t, e)
}

func testShowHistory(t *testing.T, e *env) {
	e.want(exitFailed, "run", "--job", "report", "--tz", "UTC", "--max-attempts", "1", "--", "sh", "-c", "exit 3")
	e.want(exitOK, "reset", "report", "2026-10-27")
	e.want(exitOK, "run", "--job", "report", "--tz", "UTC", "--", "true")
	e.want(exitOK, "rerun", "report", "--period", "2026-10-27", "--reason", "flow table corrected", "--request-id", "INC-4711")
	e.want(exitOK, "run", "--job", "report", "--tz", "UTC", "--", "true")

	out, _ := e.want(exitOK, "show", "report", "2026-10-27")
	text := out[strings.Index(out, "history:"):]
	for _, want := range []string{
		"revision 0: the first run",
		"attempt 1 parked: started 20", ", ended 20",
		": command exited with status 3",
		"attempt 2 done",
		"revision 1: a re-run",
		"requested ", "by " + whoAsks() + " (request INC-4711): flow table corrected",
		"attempt 3 done",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("show's history lacks %q:\n%s", want, out)
		}
	}
	if i, j := strings.Index(text, "attempt 2 done"), strings.Index(text, "revision 1:"); i < 0 || j < 0 || i > j {
		t.Errorf("show's history: attempt 2 is not under revision 0:\n%s", text)
	}

	stdout, _ := e.want(exitOK, "show", "report", "2026-10-27", "--json")
	var got struct {
		Revision int64 `json:"revision"`
		History  []struct {
			Revision int64 `json:"revision"`
			Requests []struct {
				RequestID string     `json:"request_id"`
				By        string     `json:"by"`
				Reason    string     `json:"reason"`
				Requested *time.Time `json:"requested"`
				State     string     `json:"state"`
			} `json:"requests"`
			Attempts []struct {
				Attempt int64      `json:"attempt"`
				Outcome string     `json:"outcome"`
				Error   string     `json:"error"`
				Owner   string     `json:"owner"`
				Started *time.Time `json:"started"`
				Ended   *time.Time `json:"ended"`
			} `json:"attempts"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("show --json: %v\n%s", err, stdout)
	}
	if got.Revision != 1 || len(got.History) != 2 || got.History[0].Revision != 0 || got.History[1].Revision != 1 {
		t.Fatalf("show --json: revision %d, history %+v; want revision 1, revisions 0 and 1", got.Revision, got.History)
	}
	r0, r1 := got.History[0], got.History[1]
	if len(r0.Requests) != 0 || len(r0.Attempts) != 2 || r0.Attempts[0].Outcome != "parked" || !strings.Contains(r0.Attempts[0].Error, "status 3") ||
		r0.Attempts[1].Outcome != "done" || r0.Attempts[1].Attempt != 2 {
		t.Errorf("revision 0: %+v; want no request, attempt 1 parked (status 3), attempt 2 done", r0)
	}
	for _, a := range append(r0.Attempts, r1.Attempts...) {
		if a.Owner == "" || a.Started == nil || a.Ended == nil {
			t.Errorf("attempt %d: %+v; want its owner and times", a.Attempt, a)
		}
	}
	if len(r1.Requests) != 1 || r1.Requests[0].RequestID != "INC-4711" || r1.Requests[0].Reason != "flow table corrected" ||
		r1.Requests[0].By != whoAsks() || r1.Requests[0].Requested == nil || r1.Requests[0].State != "queued" {
		t.Errorf("revision 1's requests: %+v; want INC-4711 by %s, flow table corrected, queued, with its time", r1.Requests, whoAsks())
	}
	if len(r1.Attempts) != 1 || r1.Attempts[0].Attempt != 3 || r1.Attempts[0].Outcome != "done" {
		t.Errorf("revision 1's attempts: %+v; want attempt 3 done", r1.Attempts)
	}
}
