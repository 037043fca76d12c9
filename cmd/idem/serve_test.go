//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testwait"
)

// TestServeCheck: --check exits 2 with the file's line and the reason (the
// lines the parser refuses are internal/crontab's TestParseRefuses), creates
// no ledger, and with -v prints the jobs of a valid file.
func TestServeCheck(t *testing.T) {
	e := newEnv(t, "")
	for _, tc := range []struct {
		name, file, want string
	}{
		{"fields", "# x\n\n* * * * tick true\n", "crontab:3: want MIN HOUR DOM MON DOW JOB COMMAND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(e.dir, "crontab")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, stderr := e.want(exitUsage, "serve", "--check", path)
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want %q in it", stderr, tc.want)
			}
			if _, err := os.Stat(e.ledger); err == nil {
				t.Errorf("--check created the ledger")
			}
		})
	}
	path := filepath.Join(e.dir, "good")
	good := "# settle yesterday, Shanghai time\nCRON_TZ=Asia/Shanghai\n0 2 * * * settle sh -c 'echo \"$IDEM_PERIOD\" >> out.txt'\n*/15 * * * * sync true\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _ := e.want(exitOK, "serve", "-v", "--check", path)
	for _, want := range []string{`good:3: settle cron(0 2 * * *)@Asia/Shanghai: sh -c echo "$IDEM_PERIOD" >> out.txt`, "good:4: sync cron(*/15 * * * *)@Asia/Shanghai: true"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--check -v printed %q, want %q in it", stdout, want)
		}
	}
}

// TestServeSIGTERMMidRun: SIGTERM while a command runs reaches the command;
// its end is recorded (here: killed, so failed), idem serve exits 0, and
// the next idem serve runs the period again. Nothing is lost.
func TestServeSIGTERMMidRun(t *testing.T) {
	e := newEnv(t, "2026-10-28T02:00:30Z")
	const period = "2026-10-28T02:00Z"
	crontab := filepath.Join(e.dir, "crontab")
	line := `* * * * * tick sh -c 'echo "started $IDEM_PERIOD $IDEM_ATTEMPT" >> out.txt; [ "$IDEM_ATTEMPT" = 1 ] || exit 0; while :; do sleep 0.1; done'` + "\n"
	if err := os.WriteFile(crontab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		out, _, code := e.idem("show", "tick", period, "--json")
		if code != 0 {
			return "(none)"
		}
		var rec struct{ Status string }
		if err := json.Unmarshal([]byte(out), &rec); err != nil {
			t.Fatalf("show --json: %v: %s", err, out)
		}
		return rec.Status
	}
	serve := func(wantLine string) (*exec.Cmd, *bytes.Buffer) {
		cmd := e.command("serve", "--ledger", e.ledger, "--crontab", crontab, "--since", "latest")
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		e.await(cmd, &b, "the command to start ("+wantLine+" in out.txt)", func() {
			for !slices.Contains(e.lines("out.txt"), wantLine) {
				time.Sleep(20 * time.Millisecond) // a poll of the file
			}
		})
		return cmd, &b
	}
	cmd, out := serve("started " + period + " 1")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(cmd, out); err != nil {
		t.Fatalf("idem serve after SIGTERM: %v; its output:\n%s", err, out)
	}
	if got := status(); got != "failed" {
		t.Fatalf("after SIGTERM the period is %s, want failed (the command was killed); idem serve said:\n%s", got, out)
	}
	if !strings.Contains(out.String(), "killed by signal") {
		t.Errorf("idem serve did not report the killed command:\n%s", out)
	}

	e.now = "2026-10-28T02:00:40Z" // past the backoff
	cmd, out = serve("started " + period + " 2")
	e.await(cmd, out, "the period to be done", func() {
		for status() != "done" {
			time.Sleep(20 * time.Millisecond)
		}
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(cmd, out); err != nil {
		t.Fatalf("idem serve after SIGTERM: %v; its output:\n%s", err, out)
	}
}

// TestServeCheckCronieLines: lines pasted from a crontab mean in idem serve
// what they mean in cronie: 7 is Sunday, descriptors (@daily) are lines
// (@reboot, which idem serve cannot honour, is refused saying why:
// internal/crontab's TestParseRefuses); a bad --since is refused too.
func TestServeCheckCronieLines(t *testing.T) {
	e := newEnv(t, "")
	path := filepath.Join(e.dir, "crontab")
	good := "0 0 * * 7 sunday true\n0 0 */2 * 1 odd_mondays true\n@daily midnight true\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _ := e.want(exitOK, "serve", "-v", "--check", path)
	for _, want := range []string{"crontab:1: sunday cron(0 0 * * 7)@", "crontab:3: midnight cron(@daily)@"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--check -v printed %q, want %q in it", stdout, want)
		}
	}
	for file, want := range map[string]string{
		"* * * * * tick true\n": "--since \"yesterday\": not next, latest or a time",
	} {
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"serve", "--check", path}
		if strings.HasPrefix(want, "--since") {
			args = append(args, "--since", "yesterday")
		}
		if _, stderr := e.want(exitUsage, args...); !strings.Contains(stderr, want) {
			t.Errorf("%q: stderr %q, want %q in it", file, stderr, want)
		}
	}
}

// ranWithDaily runs the job settle once under idem run --schedule daily,
// so that the ledger has it with that schedule (its cursor 2026-10-27).
func ranWithDaily(e *env) {
	e.t.Helper()
	e.want(exitOK, "run", "--job", "settle", "--schedule", "daily", "--tz", "UTC", "--", "true")
}

// TestServeCheckNamesJobWithOtherSchedule: --check with a ledger (--ledger
// here; --postgres likewise) exits 2 naming a job of the file that the
// ledger has under another schedule; one it has under the same periods
// passes; with no ledger named, or one that does not exist yet, the file
// alone is checked and nothing is created.
func TestServeCheckNamesJobWithOtherSchedule(t *testing.T) {
	e := newEnv(t, "2026-10-28T02:00:30Z")
	path := filepath.Join(e.dir, "crontab")
	if err := os.WriteFile(path, []byte("# settle\n0 2 * * * settle true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.want(exitOK, "serve", "--check", path) // no such ledger yet: nothing to compare
	if _, err := os.Stat(e.ledger); err == nil {
		t.Fatalf("--check created the ledger")
	}
	ranWithDaily(e)
	_, stderr := e.want(exitUsage, "serve", "--check", path)
	if want := "crontab:2: job settle ran with another schedule: the ledger " + e.ledger + " has it settled up to 2026-10-27, which is not a period of cron(0 2 * * *)@"; !strings.Contains(stderr, want) {
		t.Errorf("--check with the ledger: stderr %q, want %q in it", stderr, want)
	}
	// Without a ledger named, only the file is checked.
	cmd := e.command("serve", "--check", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("--check without a ledger: %v\n%s", err, out)
	}
	// The same periods under a business line: not a change.
	if err := os.WriteFile(path, []byte("CRON_TZ=UTC\ndaily+2h settle true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.want(exitOK, "serve", "--check", path)
}

// TestServeRefusesJobWithOtherSchedule: idem serve refuses to start (exit 2)
// on a line whose job the ledger has under another schedule, naming the
// line and the job, instead of failing its catch-up at every look.
func TestServeRefusesJobWithOtherSchedule(t *testing.T) {
	e := newEnv(t, "2026-10-28T02:00:30Z")
	ranWithDaily(e)
	path := filepath.Join(e.dir, "crontab")
	if err := os.WriteFile(path, []byte("0 2 * * * settle sh -c 'echo ran >> out.txt'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr := e.want(exitUsage, "serve", "--crontab", path)
	if want := "crontab:1: job settle ran with another schedule"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q in it", stderr, want)
	}
	if got := e.lines("out.txt"); len(got) != 0 {
		t.Errorf("the refused line ran: %q", got)
	}
}

// TestServeBusyOnOtherReplicaIsNotAFault: a replica that finds the slot
// held by another one (the normal case with several replicas) reports it
// only with -v, as what it is, not as a run killed on another host; the
// slot runs once.
func TestServeBusyOnOtherReplicaIsNotAFault(t *testing.T) {
	e := newEnv(t, "2026-10-28T02:00:30Z")
	const period = "2026-10-28T02:00Z"
	crontab := filepath.Join(e.dir, "crontab")
	line := `* * * * * tick sh -c 'echo "started $IDEM_PERIOD" >> out.txt; while [ ! -e release ]; do sleep 0.05; done'` + "\n"
	if err := os.WriteFile(crontab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := func(extra ...string) (*exec.Cmd, *lockedBuffer) {
		cmd := e.command(append([]string{"serve", "--ledger", e.ledger, "--crontab", crontab, "--since", "latest"}, extra...)...)
		var b lockedBuffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, &b
	}
	a, aOut := serve()
	testwait.Until(t, func() bool { return slices.Contains(e.lines("out.txt"), "started "+period) },
		"the first replica to start the command; its output: %s", aOut)
	b, bOut := serve("-v")
	testwait.Until(t, func() bool { return strings.Contains(bOut.String(), "tick "+period+":") },
		"the second replica to report the held slot; its output: %s", bOut)
	if err := os.WriteFile(filepath.Join(e.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd *exec.Cmd
		out *lockedBuffer
	}{{a, aOut}, {b, bOut}} {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		if err := testwait.Process(c.cmd, testwait.Limit(t)); err != nil {
			t.Errorf("idem serve after SIGTERM: %v; its output:\n%s", err, c.out)
		}
	}
	got := bOut.String()
	if !strings.Contains(got, "idem: tick "+period+": held by another replica") {
		t.Errorf("the second replica (-v) said %q; want that another replica holds the slot", got)
	}
	for _, fault := range []string{"busy", "killed on another host"} {
		if strings.Contains(got, fault) {
			t.Errorf("the second replica reports the held slot as a fault (%q): %q", fault, got)
		}
	}
	if n := strings.Count(strings.Join(e.lines("out.txt"), "\n"), "started"); n != 1 {
		t.Errorf("the slot started %d times, want once: %q", n, e.lines("out.txt"))
	}
	// Without -v, idem serve says nothing of it.
	var w bytes.Buffer
	held := &idem.Error{Key: idem.Key{Job: "tick", Period: period}, Outcome: idem.InProgress, Holder: "other:1:x"}
	reporter{w: &w, job: "tick", replicas: true}.period(idem.PeriodResult{Period: idem.Period{Name: period}, Outcome: idem.InProgress, Err: held})
	if w.Len() != 0 {
		t.Errorf("without -v, idem serve reported a slot held by another replica: %q", w.String())
	}
}

// TestServeReadmeCrontab: the crontab of docs/operators.md's "As a
// container's cron" passes idem serve --check, and its settle line is a business line
// (IDEM_PERIOD a day, as settle.sh reads it).
func TestServeReadmeCrontab(t *testing.T) {
	e := newEnv(t, "")
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operators.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## As a container's cron\n")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("docs/operators.md: no sh block in the section \"As a container's cron\"")
	}
	path := filepath.Join(e.dir, "crontab")
	if err := os.WriteFile(path, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _ := e.want(exitOK, "serve", "-v", "--check", path)
	if want := "settle daily@Asia/Shanghai, each due 2h0m0s after it ends: /opt/settle.sh"; !strings.Contains(stdout, want) {
		t.Errorf("--check -v of the crontab of docs/operators.md printed %q, want %q in it", stdout, want)
	}
}

// TestServeCheckNamesJobWithOtherSchedulePostgres is
// TestServeCheckNamesJobWithOtherSchedule and
// TestServeRefusesJobWithOtherSchedule with the Postgres ledger of
// $IDEM_TEST_PG_DSN.
func TestServeCheckNamesJobWithOtherSchedulePostgres(t *testing.T) {
	t.Parallel()
	dsn, schema := pgSchema(t, "idemserve_")
	e := newEnv(t, "2026-10-28T02:00:30Z")
	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}
	path := filepath.Join(e.dir, "crontab")
	if err := os.WriteFile(path, []byte("0 2 * * * settle true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.want(exitOK, "serve", "--check", path)
	ranWithDaily(e)
	want := "crontab:1: job settle ran with another schedule: the postgres ledger (schema " + schema + ") has it settled up to 2026-10-27"
	if _, stderr := e.want(exitUsage, "serve", "--check", path); !strings.Contains(stderr, want) {
		t.Errorf("--check: stderr %q, want %q in it", stderr, want)
	}
	if _, stderr := e.want(exitUsage, "serve", "--crontab", path); !strings.Contains(stderr, want) {
		t.Errorf("serve: stderr %q, want %q in it", stderr, want)
	}
}
