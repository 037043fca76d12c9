//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestParamsMismatchExitCode: a period run with --params a, triggered
// again with --params b, exits 6 (params mismatch) and starts nothing,
// writes nothing; with --params a again, or without --params, it is done.
func TestParamsMismatchExitCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs("--params", "a")...)
	before, _ := e.want(exitOK, "show", "settle", "2026-10-27", "--json")
	_, stderr := e.want(exitMismatch, runArgs("--params", "b")...)
	for _, want := range []string{"settle 2026-10-27", "params mismatch", "nothing was started"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if got, want := e.lines("out.txt"), []string{"2026-10-27 1"}; !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q: the command ran on a mismatch", got, want)
	}
	after, _ := e.want(exitOK, "show", "settle", "2026-10-27", "--json")
	if after != before {
		t.Fatalf("record changed on a mismatch:\n%s\n→\n%s", before, after)
	}
	var rec struct{ Fingerprint string }
	if err := json.Unmarshal([]byte(after), &rec); err != nil || len(rec.Fingerprint) != 64 {
		t.Fatalf("show --json: fingerprint %q (%v), want 64 hex digits", rec.Fingerprint, err)
	}
	if !strings.Contains(stderr, rec.Fingerprint[:12]) {
		t.Errorf("stderr does not name the stored fingerprint %s:\n%s", rec.Fingerprint[:12], stderr)
	}
	table, _ := e.want(exitOK, "show", "settle", "2026-10-27")
	if !strings.Contains(table, "params:") || !strings.Contains(table, rec.Fingerprint) {
		t.Errorf("show lacks the fingerprint:\n%s", table)
	}
	e.want(exitDone, runArgs("--params", "a")...)
	e.want(exitDone, runArgs()...)
	// --catch-up none takes the same path through Run.
	e.want(exitMismatch, runArgs("--params", "b", "--catch-up", "none")...)
}

// TestParamsFromArgs: with --params-from-args, a changed argument of the
// command is a mismatch.
func TestParamsFromArgs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	cmd := func(rate string) []string {
		return []string{"run", "--job", "settle", "--tz", "UTC", "--params-from-args", "--",
			"sh", "-c", `echo "$IDEM_PERIOD $0" >> out.txt`, rate}
	}
	e.want(exitOK, cmd("eur")...)
	e.want(exitDone, cmd("eur")...)
	e.want(exitMismatch, cmd("usd")...)
	if got, want := e.lines("out.txt"), []string{"2026-10-27 eur"}; !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
	e.want(exitUsage, append([]string{"run", "--params", "x"}, cmd("eur")[1:]...)...)
}

// TestCaptureReplaysOutput: with --capture, the first run's output is
// stored with the done mark and printed again by a duplicate trigger,
// without running the command; idem show prints it.
func TestCaptureReplaysOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	run := func(extra ...string) []string {
		args := append([]string{"run", "--job", "report", "--tz", "UTC", "--capture", "64"}, extra...)
		return append(args, "--", "sh", "-c", `echo "$IDEM_PERIOD" >> out.txt; echo "s3://reports/$IDEM_PERIOD-$IDEM_ATTEMPT.pdf"`)
	}
	first, _ := e.want(exitOK, run()...)
	if first != "s3://reports/2026-10-27-1.pdf\n" {
		t.Fatalf("first run's stdout %q", first)
	}
	for i := range 3 {
		again, _ := e.want(exitDone, run()...)
		if again != first {
			t.Fatalf("trigger %d printed %q, want the first run's %q", i, again, first)
		}
	}
	again, _ := e.want(exitDone, run("--catch-up", "none")...)
	if again != first {
		t.Fatalf("--catch-up none printed %q, want %q", again, first)
	}
	if got := e.lines("out.txt"); len(got) != 1 {
		t.Fatalf("the command ran %d times, want 1", len(got))
	}
	show, _ := e.want(exitOK, "show", "report", "2026-10-27")
	if !strings.Contains(show, "s3://reports/2026-10-27-1.pdf") {
		t.Fatalf("show lacks the stored output:\n%s", show)
	}
	// Longer output than --capture keeps: its first bytes.
	e.want(exitOK, "run", "--job", "long", "--tz", "UTC", "--capture", "4", "--", "echo", "0123456789")
	if out, _ := e.want(exitDone, "run", "--job", "long", "--tz", "UTC", "--capture", "4", "--", "echo", "0123456789"); out != "0123" {
		t.Fatalf("replay of a cut output: %q, want %q", out, "0123")
	}
	e.want(exitUsage, "run", "--job", "long", "--capture", "70000", "--", "true")
}
