//go:build unix

// The CLI's end-to-end tests run commands through sh, and kill process
// groups: they need a Unix system.

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
	"github.com/idemgo/idem/pgledger"
)

// idemBin is the idem binary, built once by TestMain.
var idemBin string

// buildEnv is the environment of docs/operators.md's install command
// (CGO_ENABLED=0), in which TestMain builds idemBin; the tests that build
// idem again build it so too.
var buildEnv []string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	idemBin = filepath.Join(dir, "idem")
	// Built as the install command of docs/operators.md builds it.
	env, args, err := readmeBuild(filepath.Join("..", "..", "docs", "operators.md"), idemBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	buildEnv = env
	build := exec.Command("go", args...)
	build.Env = append(os.Environ(), env...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	err = build.Start()
	if err == nil {
		// Before m.Run, the test binary's -timeout does not cover the
		// build: one still running after 5 minutes (a cold build cache on
		// a loaded machine takes one or two) is sent SIGQUIT, its
		// goroutines to stderr.
		err = testwait.Process(build, 5*time.Minute)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "building idem:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is a test's environment: a working directory with a ledger, and a
// fixed "now" for idem.
type env struct {
	t      *testing.T
	dir    string
	ledger string
	pg     []string // with Postgres: --postgres DSN --postgres-schema S instead of --ledger
	now    string   // $IDEM_NOW
	clock  string   // $IDEM_CLOCK
}

func newEnv(t *testing.T, now string) *env {
	t.Helper()
	dir := t.TempDir()
	return &env{t: t, dir: dir, ledger: filepath.Join(dir, "ledger.db"), now: now}
}

// environ is the host's environment without IDEM_* variables, plus the
// test's fixed clock.
func (e *env) environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			out = append(out, kv)
		}
	}
	if e.now != "" {
		out = append(out, "IDEM_NOW="+e.now)
	}
	if e.clock != "" {
		out = append(out, "IDEM_CLOCK="+e.clock)
	}
	// idem's state directory (the Postgres ledger's command locks): the
	// test's own.
	return append(out, "XDG_STATE_HOME="+filepath.Join(e.dir, "state"))
}

func (e *env) command(args ...string) *exec.Cmd {
	cmd := exec.Command(idemBin, args...)
	cmd.Dir = e.dir
	cmd.Env = e.environ()
	// A wrapped command left running (idem stuck and sent SIGQUIT, say)
	// must not hold Wait on the output pipes it inherited.
	cmd.WaitDelay = testwait.QuitGrace
	return cmd
}

// finish waits for cmd, idem started by the test, for testwait.Limit(t) at
// most; an idem still running then is sent SIGQUIT (the Go runtime prints
// its goroutines to its stderr) and the test fails, naming the command and
// with its stderr (stderr is cmd's, read once cmd has been waited for).
func (e *env) finish(cmd *exec.Cmd, stderr *bytes.Buffer) error {
	e.t.Helper()
	err := testwait.Process(cmd, testwait.Limit(e.t))
	var stuck *testwait.StuckError
	if errors.As(err, &stuck) {
		out := "(not reaped: unreadable)"
		if stuck.Waited {
			out = stderr.String()
		}
		e.t.Fatalf("idem %s (pid %d): %v; its stderr:\n%s", strings.Join(cmd.Args[1:], " "), cmd.Process.Pid, err, out)
	}
	return err
}

// await runs read (a read of the output of cmd, idem started by the test)
// for testwait.Limit(t) at most. If it has not returned by then, idem is
// sent SIGQUIT (its goroutines go to its stderr) and the test fails, naming
// what it waited for, with idem's stderr.
func (e *env) await(cmd *exec.Cmd, stderr *bytes.Buffer, what string, read func()) {
	e.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		read()
	}()
	d := testwait.Limit(e.t)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	err := testwait.Process(cmd, 0) // SIGQUIT at once
	out := "(not reaped: unreadable)"
	if stuck := (*testwait.StuckError)(nil); !errors.As(err, &stuck) || stuck.Waited {
		out = stderr.String()
	}
	e.t.Fatalf("gave up after %s waiting for %s: idem %s (pid %d): %v; its stderr:\n%s", d, what, strings.Join(cmd.Args[1:], " "), cmd.Process.Pid, err, out)
}

// idem runs the idem binary with args, the test's ledger flags inserted
// after the subcommand (unless args[0] is "doctor"), and returns its output
// and exit code.
func (e *env) idem(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	full := args
	if len(args) > 0 && args[0] != "doctor" {
		store := []string{"--ledger", e.ledger}
		if e.pg != nil {
			store = e.pg
		}
		full = append(append([]string{args[0]}, store...), args[1:]...)
	}
	cmd := e.command(full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Start()
	if err == nil {
		err = e.finish(cmd, &errb)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		e.t.Fatalf("idem %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// want runs idem and fails the test unless it exits with code.
func (e *env) want(code int, args ...string) (stdout, stderr string) {
	e.t.Helper()
	stdout, stderr, got := e.idem(args...)
	if got != code {
		e.t.Fatalf("idem %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, stdout, stderr)
	}
	return stdout, stderr
}

// lines returns the lines of a file in the test's directory ("" if missing).
func (e *env) lines(name string) []string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// appendLine is a wrapped command that appends "$IDEM_PERIOD $IDEM_ATTEMPT"
// to out.txt.
var appendLine = []string{"--", "sh", "-c", `echo "$IDEM_PERIOD $IDEM_ATTEMPT" >> out.txt`}

func runArgs(extra ...string) []string {
	args := append([]string{"run", "--job", "settle", "--tz", "UTC"}, extra...)
	return append(args, appendLine...)
}

func TestRunTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs()...)
	e.want(exitDone, runArgs()...)
	e.want(exitOK, runArgs("--ok-if-done")...)
	if got, want := e.lines("out.txt"), []string{"2026-10-27 1"}; !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
}

func TestEnvironmentOfTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, "run", "--job", "settle", "--tz", "Asia/Shanghai", "--",
		"sh", "-c", `printf '%s\n' "$IDEM_JOB" "$IDEM_PERIOD" "$IDEM_ATTEMPT" "$IDEM_REQUEST_ID" "$IDEM_PERIOD_START" "$IDEM_PERIOD_END" > env.txt`)
	got := e.lines("env.txt")
	// 02:00 UTC is 10:00 in Shanghai: the day that has ended there is the 27th.
	want := []string{"settle", "2026-10-27", "1", "", "2026-10-27T00:00:00+08:00", "2026-10-28T00:00:00+08:00"}
	if len(got) != len(want) {
		t.Fatalf("env.txt = %q", got)
	}
	if !strings.HasPrefix(got[3], "idem-") {
		t.Errorf("IDEM_REQUEST_ID = %q, want idem-...", got[3])
	}
	got[3] = ""
	if !equal(got, want) {
		t.Errorf("environment = %q, want %q", got, want)
	}
}

// TestTraceparentReachesTheCommand: a trace context set for idem
// (TRACEPARENT, TRACESTATE) reaches the command 'idem run' runs.
func TestTraceparentReachesTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	const tp, ts = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor=x"
	cmd := e.command("run", "--ledger", e.ledger, "--job", "settle", "--tz", "UTC", "--",
		"sh", "-c", `printf '%s\n' "$TRACEPARENT" "$TRACESTATE" > env.txt`)
	cmd.Env = append(cmd.Env, "TRACEPARENT="+tp, "TRACESTATE="+ts)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(cmd, &stderr); err != nil {
		t.Fatalf("idem run: %v; stderr:\n%s", err, stderr.String())
	}
	if got, want := e.lines("env.txt"), []string{tp, ts}; !equal(got, want) {
		t.Fatalf("the command's TRACEPARENT, TRACESTATE = %q, want %q", got, want)
	}
}

// started starts idem with a command that appends its line to out.txt,
// prints "started", and sleeps; it returns once the command has started.
// idem runs in a process group of its own so that the test can kill it
// together with the command, as a crash of the host would.
func (e *env) started(extra ...string) *exec.Cmd {
	e.t.Helper()
	args := append([]string{"run", "--ledger", e.ledger, "--job", "settle", "--tz", "UTC"}, extra...)
	args = append(args, "--", "sh", "-c", `echo "$IDEM_PERIOD $IDEM_ATTEMPT $IDEM_REQUEST_ID" >> out.txt; echo started; exec sleep 600`)
	cmd := e.command(args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var line string
	e.await(cmd, &stderr, `the command's "started"`, func() { line, err = bufio.NewReader(stdout).ReadString('\n') })
	if err != nil || line != "started\n" {
		e.t.Fatalf("waiting for the command to start: %q, %v", line, err)
	}
	return cmd
}

// killGroup SIGKILLs idem and its command.
func killGroup(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Process(cmd, testwait.Limit(t)); errors.As(err, new(*testwait.StuckError)) {
		t.Fatalf("idem (pid %d) after SIGKILL: %v", cmd.Process.Pid, err)
	}
}

// TestKilledRunTakenOverAtOnce: while a run holds the period, another run
// is busy. Once the holding idem is SIGKILLed (its command gets SIGTERM and
// ends), the next run on this host takes the period over at once, at the
// same "now": it does not wait out the killed run's lease (1m).
func TestKilledRunTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	holder := e.started()
	_, stderr := e.want(exitBusy, runArgs()...)
	if !strings.Contains(stderr, "busy") {
		t.Errorf("busy run's stderr: %q", stderr)
	}
	owner := fmt.Sprintf(":%d:", holder.Process.Pid)
	if out, _ := e.want(exitOK, "ls"); !strings.Contains(out, "running (") || !strings.Contains(out, owner) || strings.Contains(out, ";start=") {
		t.Errorf("ls while the run lives does not say running (host:pid:…): %s", out)
	}
	if err := holder.Process.Kill(); err != nil { // idem alone
		t.Fatal(err)
	}
	_ = holder.Wait()
	if out, _ := e.want(exitOK, "ls"); !strings.Contains(out, "died") || !strings.Contains(out, owner) {
		t.Errorf("ls after the kill does not say that the run (pid %d) died: %s", holder.Process.Pid, out)
	}
	e.want(exitOK, runArgs()...)
	e.want(exitDone, runArgs()...)
	lines := e.lines("out.txt")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "2026-10-27 1 idem-") || lines[1] != "2026-10-27 2" {
		t.Fatalf("out.txt = %q, want the killed attempt 1 and the recovering attempt 2", lines)
	}
	out, _ := e.want(exitOK, "show", "settle", "2026-10-27", "--json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	if rec.Status != "done" || rec.Attempt != 2 || rec.Failures != 0 {
		t.Errorf("record after recovery: %+v", rec)
	}
}

// lineWithin reads lines from r until one contains want, for at most d; it
// fails the test, with what it read, if none does by then.
func lineWithin(t *testing.T, r *bufio.Reader, want string, d time.Duration) {
	t.Helper()
	var got strings.Builder
	found := make(chan bool, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			got.WriteString(line)
			if strings.Contains(line, want) || err != nil {
				found <- err == nil
				return
			}
		}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ok := <-found:
		if !ok {
			t.Fatalf("waiting for a line with %q: the output ended:\n%s", want, got.String())
		}
	case <-timer.C:
		t.Fatalf("waiting for a line with %q: none after %v", want, d)
	}
}

// TestTakeOverWaitsForTheKilledRunsCommand: the command of a killed idem
// that ignores SIGTERM runs on. The next run takes the period over at once,
// but starts its command only once the old one has ended: two commands of
// one period never run at once on a host.
func TestTakeOverWaitsForTheKilledRunsCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	holder := e.command("run", "--ledger", e.ledger, "--job", "settle", "--tz", "UTC", "--",
		"sh", "-c", `trap '' TERM; echo "$IDEM_PERIOD $IDEM_ATTEMPT" >> out.txt; echo started; sleep 600`)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL) })
	lineWithin(t, bufio.NewReader(stdout), "started", time.Minute)
	if err := holder.Process.Kill(); err != nil { // idem alone: its command ignores the SIGTERM it gets
		t.Fatal(err)
	}
	_ = holder.Wait()

	next := e.command(append([]string{"run", "--ledger", e.ledger}, runArgs()[1:]...)...)
	stderr, err := next.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Process.Kill() })
	r := bufio.NewReader(stderr)
	lineWithin(t, r, "waiting for the command of an earlier attempt to end", time.Minute)
	if got := e.lines("out.txt"); len(got) != 1 {
		t.Fatalf("out.txt = %q: the new command started while the old one runs", got)
	}
	// The old command ends: the new one runs.
	if err := syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var rest bytes.Buffer
	go func() {
		_, _ = rest.ReadFrom(r) // until idem exits
		exited <- next.Wait()
	}()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the taking-over run: %v\n%s", err, rest.String())
		}
	case <-timer.C:
		_ = next.Process.Signal(syscall.SIGQUIT) // its goroutines, on its stderr, and exit
		dump := time.NewTimer(10 * time.Second)
		defer dump.Stop()
		select {
		case err := <-exited:
			t.Fatalf("the taking-over run has not exited 1m after the old command ended (%v); its stderr and goroutines:\n%s", err, rest.String())
		case <-dump.C:
			t.Fatalf("the taking-over run has not exited 1m after the old command ended, nor 10s after SIGQUIT")
		}
	}
	if got := e.lines("out.txt"); len(got) != 2 || got[1] != "2026-10-27 2" {
		t.Fatalf("out.txt = %q, want the killed attempt 1 and attempt 2", got)
	}
}

// TestHolderElsewhereWaitsOutTheLease: a period held by a run on another
// host (its record written into the ledger) cannot be proven dead from
// here: runs are busy until its lease expires, then take it over.
func TestHolderElsewhereWaitsOutTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	l, err := idem.OpenLedger(e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Date(2026, 10, 28, 2, 1, 0, 0, time.UTC).UnixMicro()
	_, err = l.DB().Exec(`INSERT INTO idem_runs(job, period, status, attempt, owner, lease_until, created, updated)
		VALUES('settle', '2026-10-27', 'running', 1, ?, ?, ?, ?)`,
		"elsewhere.example:4242:0badc0de;start=1;boot=00000000-0000-0000-0000-000000000000;pidns=4026531836;timens=4026531834",
		until, until, until)
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, stderr := e.want(exitBusy, runArgs()...)
	if !strings.Contains(stderr, "elsewhere.example") {
		t.Errorf("busy run's stderr does not name the holder: %q", stderr)
	}
	e.now = "2026-10-28T02:02:00Z" // the lease has expired
	e.want(exitOK, runArgs()...)
	if got := e.lines("out.txt"); !equal(got, []string{"2026-10-27 2"}) {
		t.Fatalf("out.txt = %q", got)
	}
}

func TestKilledAtLeastOnceWithShortLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	killGroup(t, e.started("--lease", "1s"))
	e.now = "2026-10-28T02:00:02Z" // past the 1s lease
	e.want(exitOK, runArgs("--lease", "1s")...)
	if got := e.lines("out.txt"); len(got) != 2 || got[1] != "2026-10-27 2" {
		t.Fatalf("out.txt = %q", got)
	}
}

func TestKilledAtMostOnceIsUnknownUntilResolved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	killGroup(t, e.started("--mode", "at-most-once"))

	e.now = "2026-10-28T03:00:00Z" // the lease has long expired
	_, stderr := e.want(exitUnknown, runArgs("--mode", "at-most-once")...)
	if !strings.Contains(stderr, "idem resolve --ledger") || !strings.Contains(stderr, "settle 2026-10-27 --done") {
		t.Errorf("unknown run's stderr does not say how to resolve: %q", stderr)
	}
	e.want(exitUnknown, runArgs("--mode", "at-most-once")...)

	out, _ := e.want(exitOK, "ls", "--status", "unknown", "--json")
	var recs []recordJSON
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	if len(recs) != 1 || recs[0].Period != "2026-10-27" || recs[0].LastError == "" {
		t.Fatalf("unknown records: %+v", recs)
	}

	e.want(exitOK, "resolve", "settle", "2026-10-27", "--done")
	e.want(exitDone, runArgs("--mode", "at-most-once")...)
	if got := e.lines("out.txt"); len(got) != 1 {
		t.Fatalf("at-most-once ran the command again: out.txt = %q", got)
	}
	// Resolving a done period is refused.
	e.want(exitFailed, "resolve", "settle", "2026-10-27", "--retry")
}

func TestResolveRetryRunsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "sh", "-c", `echo "$IDEM_ATTEMPT" >> out.txt; exit 1`)
	e.want(exitOK, "resolve", "pay", "2026-10-27", "--retry")
	e.want(exitOK, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "sh", "-c", `echo "$IDEM_ATTEMPT" >> out.txt`)
	if got := e.lines("out.txt"); !equal(got, []string{"1", "2"}) {
		t.Fatalf("out.txt = %q", got)
	}
}

func TestCatchUpAllAfterThreeMissedDays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs()...)
	e.now = "2026-10-31T02:00:00Z" // the host was down on the 29th, 30th and 31st
	e.want(exitOK, runArgs("--catch-up", "all")...)
	e.want(exitDone, runArgs("--catch-up", "all")...)
	want := []string{"2026-10-27 1", "2026-10-28 1", "2026-10-29 1", "2026-10-30 1"}
	if got := e.lines("out.txt"); !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
}

func TestCatchUpMaxDefersTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs("--since", "2026-10-20", "--max", "3")...)
	if got := e.lines("out.txt"); len(got) != 3 || got[0] != "2026-10-20 1" || got[2] != "2026-10-22 1" {
		t.Fatalf("first call: out.txt = %q", got)
	}
	e.want(exitOK, runArgs("--max", "0")...)
	if got := e.lines("out.txt"); len(got) != 8 || got[7] != "2026-10-27 1" {
		t.Fatalf("second call: out.txt = %q", got)
	}
}

func TestCatchUpLatestAndNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs("--catch-up", "latest")...)
	e.now = "2026-10-31T02:00:00Z"
	e.want(exitOK, runArgs("--catch-up", "latest")...)
	if got := e.lines("out.txt"); !equal(got, []string{"2026-10-27 1", "2026-10-30 1"}) {
		t.Fatalf("latest: out.txt = %q", got)
	}
	out, _ := e.want(exitOK, "ls", "--status", "skipped", "--json")
	var recs []recordJSON
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Period != "2026-10-28" || recs[1].Period != "2026-10-29" {
		t.Fatalf("skipped: %+v", recs)
	}

	n := newEnv(t, "2026-10-28T02:00:00Z")
	n.want(exitOK, "run", "--job", "report", "--tz", "UTC", "--catch-up", "none", "--", "sh", "-c", `echo "$IDEM_PERIOD" >> out.txt`)
	n.now = "2026-10-31T02:00:00Z"
	n.want(exitOK, "run", "--job", "report", "--tz", "UTC", "--catch-up", "none", "--", "sh", "-c", `echo "$IDEM_PERIOD" >> out.txt`)
	n.want(exitDone, "run", "--job", "report", "--tz", "UTC", "--catch-up", "none", "--", "sh", "-c", `echo "$IDEM_PERIOD" >> out.txt`)
	if got := n.lines("out.txt"); !equal(got, []string{"2026-10-27", "2026-10-30"}) {
		t.Fatalf("none: out.txt = %q", got)
	}
}

func TestSchedules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T13:20:00Z")
	for _, c := range []struct{ schedule, tz, want string }{
		{"hourly", "UTC", "2026-10-28T12:00Z"},
		{"weekly", "UTC", "2026-W43"},
		{"monthly", "Europe/Berlin", "2026-09"},
		{"0 */6 * * *", "America/New_York", "2026-10-28T04:00Z"}, // 00:00 EDT, the slot before 06:00 EDT
	} {
		out, _ := e.want(exitOK, "run", "-v", "--job", "j-"+c.schedule, "--schedule", c.schedule, "--tz", c.tz, "--", "sh", "-c", `echo "$IDEM_PERIOD"`)
		if got := strings.TrimSpace(out); got != c.want {
			t.Errorf("--schedule %q --tz %s: period %q, want %q", c.schedule, c.tz, got, c.want)
		}
	}
}

func TestFailureParksThenReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	failing := []string{"run", "--job", "report", "--tz", "UTC", "--max-attempts", "1", "--", "sh", "-c", `echo "$IDEM_ATTEMPT" >> out.txt; exit 3`}
	_, stderr := e.want(exitFailed, failing...)
	if !strings.Contains(stderr, ": parked") || !strings.Contains(stderr, "exited with status 3") || !strings.Contains(stderr, "idem reset --ledger") {
		t.Errorf("stderr of a run that parked its period: %q", stderr)
	}
	e.want(exitFailed, failing...) // parked: does not run again
	if got := e.lines("out.txt"); !equal(got, []string{"1"}) {
		t.Fatalf("a parked period ran again: %q", got)
	}
	out, _ := e.want(exitOK, "show", "report", "2026-10-27")
	for _, want := range []string{"status:       parked", "failures:     1", "last error:   command exited with status 3", "lease owner:"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	e.want(exitOK, "reset", "report", "2026-10-27")
	e.want(exitOK, "run", "--job", "report", "--tz", "UTC", "--", "sh", "-c", `echo "$IDEM_ATTEMPT" >> out.txt`)
	if got := e.lines("out.txt"); !equal(got, []string{"1", "2"}) {
		t.Fatalf("out.txt = %q", got)
	}
	e.want(exitFailed, "reset", "report", "2026-10-27") // done: nothing to reset
	e.want(exitFailed, "reset", "report", "2026-10-26") // no record
}

func TestExitTempFailIsSafeToRetryAtMostOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitFailed, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--max-attempts", "1", "--", "sh", "-c", "exit 75")
	out, _ := e.want(exitOK, "show", "pay", "2026-10-27", "--json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Status != "parked" || !strings.Contains(rec.LastError, "EX_TEMPFAIL") {
		t.Fatalf("after exit 75 in at-most-once: %+v, want parked (retryable), not unknown", rec)
	}
}

func TestSignalIsForwarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	cmd := e.command("run", "--ledger", e.ledger, "--job", "settle", "--tz", "UTC", "--",
		"sh", "-c", `trap 'echo TERM > got.txt; exit 143' TERM; echo started; while :; do sleep 1; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	r := bufio.NewReader(stdout)
	var line string
	e.await(cmd, &stderr, `the command's "started"`, func() { line, err = r.ReadString('\n') })
	if err != nil || line != "started\n" {
		t.Fatalf("waiting for the command: %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil { // to idem only
		t.Fatal(err)
	}
	// Until every writer (the command's sleep too) is gone.
	e.await(cmd, &stderr, "idem and its command to exit after SIGTERM", func() { _, _ = r.ReadString(0) })
	err = e.finish(cmd, &stderr)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailed {
		t.Fatalf("idem after SIGTERM: %v, want exit %d\n%s", err, exitFailed, stderr.String())
	}
	if got := e.lines("got.txt"); !equal(got, []string{"TERM"}) {
		t.Fatalf("the command did not get SIGTERM: %q", got)
	}
	out, _ := e.want(exitOK, "show", "settle", "2026-10-27", "--json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Status != "failed" || rec.LastError == "" {
		t.Fatalf("the interrupted attempt was not recorded as failed: %+v", rec)
	}
}

func TestLsTableAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs()...)
	e.want(exitFailed, "run", "--job", "other", "--tz", "UTC", "--max-attempts", "1", "--", "false")
	out, _ := e.want(exitOK, "ls")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "JOB") {
		t.Fatalf("ls:\n%s", out)
	}
	// Aligned: every column starts at the same offset on every line.
	col := strings.Index(lines[0], "STATUS")
	for _, l := range lines[1:] {
		if len(l) < col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("column STATUS not aligned in:\n%s", out)
		}
	}
	if !strings.Contains(lines[1], "other") || !strings.Contains(lines[1], "parked") || !strings.Contains(lines[2], "settle") {
		t.Errorf("ls rows:\n%s", out)
	}
	out, _ = e.want(exitOK, "ls", "--job", "settle", "--json")
	var recs []recordJSON
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Job != "settle" || recs[0].Status != "done" || recs[0].Updated == nil || recs[0].RequestID == "" {
		t.Fatalf("ls --job settle --json: %+v", recs)
	}
	out, _ = e.want(exitOK, "ls", "--status", "pending", "--json")
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("ls --status pending --json with nothing pending: %q, want []", out)
	}
	e.want(exitUsage, "ls", "--status", "bogus")
}

func TestPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs("--since", "2026-10-01")...) // 27 days: 2026-10-01 .. 2026-10-27
	if got := e.lines("out.txt"); len(got) != 27 {
		t.Fatalf("backfill ran %d periods", len(got))
	}
	// Keep 10 days: the periods that ended by 2026-10-18T02:00 go.
	out, _ := e.want(exitOK, "prune", "--job", "settle", "--keep", "10d", "--schedule", "daily", "--tz", "UTC", "--json")
	var p pruneJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("prune --json: %v\n%s", err, out)
	}
	// 2026-10-17 ended at 2026-10-18T00:00, more than 10 days before now.
	if p.Through != "2026-10-17" || p.Deleted != 17 {
		t.Fatalf("prune --keep 10d: %+v, want through 2026-10-17, 17 deleted", p)
	}
	out, _ = e.want(exitOK, "ls", "--job", "settle", "--json")
	var recs []recordJSON
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 || recs[0].Period != "2026-10-18" {
		t.Fatalf("after prune: %d records, first %+v", len(recs), recs[0])
	}
	// A pruned period counts as done.
	out, _ = e.want(exitOK, "show", "settle", "2026-10-05")
	if !strings.Contains(out, "status:       done") || !strings.Contains(out, "pruned") {
		t.Errorf("show of a pruned period:\n%s", out)
	}
	out, _ = e.want(exitOK, "prune", "--job", "settle", "--through", "2026-10-20")
	if !strings.Contains(out, "pruned 3 records through 2026-10-20") {
		t.Errorf("prune --through: %q", out)
	}

	// An unsettled period refuses the prune.
	e.want(exitFailed, "run", "--job", "broken", "--tz", "UTC", "--max-attempts", "1", "--", "false")
	_, stderr := e.want(exitFailed, "prune", "--job", "broken", "--through", "2026-10-27")
	if !strings.Contains(stderr, "prune refused") {
		t.Errorf("prune of a parked period: %q", stderr)
	}
	e.want(exitUsage, "prune", "--job", "settle", "--keep", "10d")                               // no --schedule
	e.want(exitUsage, "prune", "--job", "settle", "--keep", "10d", "--through", "2026-10-01")    // both
	e.want(exitUsage, "prune", "--job", "settle", "--keep", "10d", "--schedule", "hourly")       // not the job's schedule
	e.want(exitUsage, "prune", "--job", "settle", "--through", "2026-10", "--schedule", "daily") // not a daily period
}

func TestDoctor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs()...)
	e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "false")
	out, _ := e.want(exitOK, "doctor", e.ledger)
	for _, want := range []string{"journal mode wal", "idem schema version", "SQLite 3.", "1 unknown", "filesystem"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor on a good ledger lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "error") {
			t.Errorf("doctor on a good ledger: %s", line)
		}
	}
	out, _ = e.want(exitOK, "doctor", "--json", e.ledger)
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if !rep.OK || len(rep.Findings) == 0 {
		t.Errorf("doctor --json: %+v", rep)
	}

	bogus := filepath.Join(e.dir, "notes.txt")
	content := []byte("this is not a database\n")
	if err := os.WriteFile(bogus, content, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = e.want(exitFailed, "doctor", bogus)
	if !strings.Contains(out, "not a SQLite database") {
		t.Errorf("doctor on a text file:\n%s", out)
	}
	if b, _ := os.ReadFile(bogus); !bytes.Equal(b, content) {
		t.Error("doctor changed the file")
	}

	missing := filepath.Join(e.dir, "missing.db")
	out, _ = e.want(exitFailed, "doctor", missing)
	if !strings.Contains(out, "no ledger at") {
		t.Errorf("doctor on a missing file:\n%s", out)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Error("doctor created the missing ledger")
	}
	// The other commands do not create a ledger either.
	e.ledger = missing
	e.want(exitUsage, "ls")
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Error("ls created the missing ledger")
	}
}

func TestLedgerFromEnvironment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	cmd := e.command(append([]string{"run", "--job", "settle", "--tz", "UTC"}, appendLine...)...)
	cmd.Env = append(cmd.Env, "IDEM_LEDGER="+e.ledger)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Start()
	if err == nil {
		err = e.finish(cmd, &out)
	}
	if err != nil {
		t.Fatalf("run with $IDEM_LEDGER: %v\n%s", err, out.String())
	}
	if _, err := os.Stat(e.ledger); err != nil {
		t.Fatalf("$IDEM_LEDGER not used: %v", err)
	}
	e.want(exitDone, runArgs()...) // the same ledger through --ledger
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	for _, args := range [][]string{
		{"run", "--job", "j", "--tz", "UTC"},                             // no command
		{"run", "--tz", "UTC", "--", "true"},                             // no --job
		{"run", "--job", "j", "--tz", "Mars/Olympus", "--", "true"},      // bad zone
		{"run", "--job", "j", "--schedule", "fortnightly", "--", "true"}, // bad schedule
		{"run", "--job", "j", "--mode", "exactly-once", "--", "true"},    // bad mode
		{"run", "--job", "j", "--catch-up", "some", "--", "true"},        // bad policy
		{"run", "--job", "j", "--catch-up", "none", "--since", "2026-10-01", "--", "true"},
		{"run", "--job", "j", "--", "/no/such/command"},     // command not found
		{"run", "--job", "j", "--bogus-flag", "--", "true"}, // unknown flag
		{"run", "--job", "j", "--max-attempts", "0", "--", "true"},
		{"run", "--job", "j", "--max-attempts", "-3", "--", "true"},
		{"run", "--job", "j", "--backoff", "-1s", "--", "true"},
		{"run", "--job", "j", "--retry-within", "-1s", "--", "true"},
		{"run", "--job", "j", "--lease", "-1s", "--", "true"},
		{"resolve", "j", "2026-10-27"},                      // neither --done nor --retry
		{"resolve", "j", "2026-10-27", "--done", "--retry"}, // both
		{"show", "j"},  // one argument
		{"frobnicate"}, // unknown command
	} {
		if _, stderr, code := e.idem(args...); code != exitUsage {
			t.Errorf("idem %s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "out.txt")); err == nil {
		t.Error("a usage error ran the command")
	}
}

// TestBadFlagValues: a flag value out of range is a usage error (exit 2)
// that names the flag, before anything runs or is written; its line says
// "idem: " once, not again after the flag's name.
func TestBadFlagValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitOK, runArgs()...)
	before, err := os.ReadFile(e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	ran := e.lines("out.txt")
	for _, c := range []struct {
		args []string
		want string
	}{
		{runArgs("--max", "-3"), "--max -3"},
		{runArgs("--lease", "0s"), "--lease 0s"},
		{runArgs("--lease", "-1m"), "--lease -1m"},
		{runArgs("--since", "yesterday"), "--since"},
		{runArgs("--job", ""), `idem: --job: invalid job "": job is empty`},
		{runArgs("--job", strings.Repeat("j", 10240)), `(10240 bytes): job is 10240 bytes, more than 200`},
		{[]string{"ls", "--limit", "-1"}, "--limit -1"},
		{[]string{"ls", "--job", "a\tb"}, `idem: --job: invalid job "a\tb"`},
		{[]string{"prune", "--job", "", "--through", "2026-10-01"}, `idem: --job: invalid job "": job is empty`},
		{[]string{"prune", "--job", "settle", "--keep", "NaNd", "--schedule", "daily"}, "--keep"},
		{[]string{"prune", "--job", "settle", "--keep", "1e300d", "--schedule", "daily"}, "--keep"},
		{[]string{"prune", "--job", "settle", "--keep", "-2w", "--schedule", "daily"}, "--keep"},
	} {
		_, stderr, code := e.idem(c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, `"-"`) || len(stderr) > 1000 || strings.Count(stderr, "idem: ") > 1 {
			t.Errorf("idem %q: exit %d, want %d with %q\n%s", c.args, code, exitUsage, c.want, stderr)
		}
	}
	if after, _ := os.ReadFile(e.ledger); !bytes.Equal(before, after) {
		t.Error("a usage error changed the ledger")
	}
	if got := e.lines("out.txt"); !equal(got, ran) {
		t.Errorf("a usage error ran the command: %q, want %q", got, ran)
	}
}

// TestForeignDatabaseRefused: pointed at another application's SQLite
// file, every command refuses (exit 2, naming the file) and leaves the
// file and its directory as they were.
func TestForeignDatabaseRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	db, err := sql.Open("sqlite", e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`PRAGMA journal_mode=WAL`, `CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)`, `INSERT INTO users VALUES(1, 'ann')`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	before, err := os.ReadFile(e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ls"}, {"show", "settle", "2026-10-27"}, {"resolve", "settle", "2026-10-27", "--done"},
		{"reset", "settle", "2026-10-27"}, {"prune", "--job", "settle", "--through", "2026-10-01"}, runArgs(),
	} {
		_, stderr, code := e.idem(args...)
		if code != exitUsage || !strings.Contains(stderr, e.ledger+" is another application's SQLite database (tables users)") {
			t.Errorf("idem %s: exit %d, want %d naming the file\n%s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
	if after, _ := os.ReadFile(e.ledger); !bytes.Equal(before, after) {
		t.Error("the application's database changed")
	}
	ents, _ := os.ReadDir(e.dir)
	if len(ents) != 1 {
		t.Errorf("files beside it: %v", ents)
	}
}

func TestHelpDocumentsExitCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	out, _ := e.want(exitOK, "run", "--help")
	for _, want := range []string{"0  ran", "1  failed", "2  usage", "3  already done", "4  busy", "5  unknown", "6  params mismatch", "IDEM_PERIOD", "75"} {
		if !strings.Contains(out, want) {
			t.Errorf("idem run --help lacks %q", want)
		}
	}
}

// pgSchema returns $IDEM_TEST_PG_DSN and the name of a new schema, prefix
// and a random part, that is dropped when the test ends; without a
// PostgreSQL it skips the test.
func pgSchema(t *testing.T, prefix string) (dsn, schema string) {
	t.Helper()
	dsn = os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("no PostgreSQL: set IDEM_TEST_PG_DSN (eval \"$(scripts/pg.sh start)\" from the repository's root)")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = prefix + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		l, err := pgledger.Open(context.Background(), dsn, pgledger.WithSchema(schema))
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer l.Close()
		if _, err := l.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return dsn, schema
}

// TestPostgres runs the CLI against the Postgres ledger named by
// $IDEM_TEST_PG_DSN (scripts/pg.sh starts a throwaway server), in a schema
// of its own. The database keeps its own clock for leases, so only due
// periods follow $IDEM_NOW here.
func TestPostgres(t *testing.T) {
	t.Parallel()
	dsn, schema := pgSchema(t, "idemcli_")
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.pg = []string{"--postgres", dsn, "--postgres-schema", schema}

	e.want(exitOK, runArgs()...)
	e.want(exitDone, runArgs()...)
	e.now = "2026-10-31T02:00:00Z"
	e.want(exitOK, runArgs()...)
	want := []string{"2026-10-27 1", "2026-10-28 1", "2026-10-29 1", "2026-10-30 1"}
	if got := e.lines("out.txt"); !equal(got, want) {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}

	e.want(exitUnknown, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "false")
	out, _ := e.want(exitOK, "show", "pay", "2026-10-30", "--json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Status != "unknown" {
		t.Fatalf("pay: %+v", rec)
	}
	e.want(exitOK, "resolve", "pay", "2026-10-30", "--done")
	e.want(exitDone, "run", "--job", "pay", "--tz", "UTC", "--mode", "at-most-once", "--", "false")

	out, _ = e.want(exitOK, "prune", "--job", "settle", "--through", "2026-10-28", "--json")
	var p pruneJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Deleted != 2 {
		t.Fatalf("prune: %+v, %v", p, err)
	}

	if _, ok := any((*pgledger.Ledger)(nil)).(idemstore.Lister); !ok {
		_, stderr := e.want(exitUsage, "ls")
		if !strings.Contains(stderr, "cannot list") {
			t.Errorf("ls on a store without List: %q", stderr)
		}
		return
	}
	out, _ = e.want(exitOK, "ls", "--json")
	var recs []recordJSON
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Job != "pay" || recs[1].Period != "2026-10-29" {
		t.Fatalf("ls: %+v", recs)
	}
}

// TestCatchUpFirstPeriodFailsIsNotSkipped is the CLI's side of a job whose
// very first period fails: two days later 'idem run' starts at that period
// (parked: it stops there and says to reset it), and after 'idem reset' it
// runs it and the two days after it, in order. What ls and doctor say about
// the parked period is then true.
func TestCatchUpFirstPeriodFailsIsNotSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-11-30T18:05:00Z") // 02:05 on 1 December in Shanghai
	run := func(cmd string, extra ...string) []string {
		args := append([]string{"run", "--job", "j", "--tz", "Asia/Shanghai", "--max-attempts", "1"}, extra...)
		return append(args, "--", "sh", "-c", `echo "$IDEM_PERIOD" >> `+cmd)
	}
	_, stderr := e.want(exitFailed, run("tried.txt; exit 1")...)
	if !strings.Contains(stderr, "j 2026-11-30: parked") || !strings.Contains(stderr, "idem reset --ledger "+e.ledger+" j 2026-11-30") {
		t.Fatalf("the failing first run says:\n%s", stderr)
	}
	out, _ := e.want(exitOK, "ls", "--job", "j")
	if !strings.Contains(out, "fix, then: idem reset") {
		t.Fatalf("ls after the failure:\n%s", out)
	}
	out, _ = e.want(exitOK, "doctor", e.ledger)
	if !strings.Contains(out, "1 parked") {
		t.Fatalf("doctor after the failure:\n%s", out)
	}

	e.now = "2026-12-02T18:05:00Z" // 48 hours later: 2026-12-01 and 2026-12-02 are due too
	_, stderr = e.want(exitFailed, run("out.txt")...)
	if got := e.lines("out.txt"); len(got) != 0 {
		t.Fatalf("ran %q past the parked first period", got)
	}
	if !strings.Contains(stderr, "j 2026-11-30: parked") {
		t.Fatalf("the run two days later says:\n%s", stderr)
	}
	out, _ = e.want(exitOK, "reset", "j", "2026-11-30")
	if !strings.Contains(out, "the next run retries it") {
		t.Fatalf("reset says: %s", out)
	}
	e.want(exitOK, run("out.txt")...)
	if got, want := e.lines("out.txt"), []string{"2026-11-30", "2026-12-01", "2026-12-02"}; !equal(got, want) {
		t.Fatalf("after the reset: out.txt = %q, want %q", got, want)
	}
	e.want(exitDone, run("out.txt")...)
	out, _ = e.want(exitOK, "ls", "--job", "j", "--json")
	var recs []recordJSON
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Status != "done" || recs[1].Status != "done" || recs[2].Status != "done" {
		t.Fatalf("ls after the catch-up: %+v", recs)
	}
}

// TestUnsettledBeforeTheCursor: a period at or before its job's catch-up
// cursor that is not settled (here run with --catch-up none before the job
// switched to catch-up; an older idem's catch-up could leave one too) is
// never reached by 'idem run' again. ls, show, doctor, reset and resolve
// say so and what to do, instead of "the next run retries it".
func TestUnsettledBeforeTheCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.want(exitFailed, "run", "--job", "settle", "--tz", "UTC", "--catch-up", "none", "--max-attempts", "1", "--", "false")
	e.now = "2026-10-29T02:00:00Z"
	e.want(exitOK, runArgs()...) // the job's first catch-up starts at 2026-10-28, after 2026-10-27
	if got := e.lines("out.txt"); !equal(got, []string{"2026-10-28 1"}) {
		t.Fatalf("out.txt = %q", got)
	}
	stranded := "catch-up has passed it"
	out, _ := e.want(exitOK, "ls", "--job", "settle")
	if !strings.Contains(out, stranded) || strings.Contains(out, "fix, then: idem reset") {
		t.Fatalf("ls of a parked period before the cursor:\n%s", out)
	}
	out, _ = e.want(exitOK, "show", "settle", "2026-10-27")
	for _, want := range []string{stranded, "the job's cursor is 2026-10-28", "idem resolve --ledger " + e.ledger + " settle 2026-10-27 --done"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
	out, _ = e.want(exitOK, "doctor", e.ledger)
	if !strings.Contains(out, "1 not settled at or before their job's catch-up cursor") || !strings.Contains(out, "0 parked") {
		t.Fatalf("doctor:\n%s", out)
	}
	out, _ = e.want(exitOK, "reset", "settle", "2026-10-27")
	if strings.Contains(out, "the next run retries it") || !strings.Contains(out, stranded) {
		t.Fatalf("reset says:\n%s", out)
	}
	out, _ = e.want(exitOK, "ls", "--job", "settle")
	if !strings.Contains(out, stranded) || strings.Contains(out, "the next run retries it") {
		t.Fatalf("ls after the reset:\n%s", out)
	}
	e.want(exitDone, runArgs()...) // indeed
	out, _ = e.want(exitOK, "resolve", "settle", "2026-10-27", "--done")
	if !strings.Contains(out, "resolved, done") {
		t.Fatalf("resolve says: %s", out)
	}
	out, _ = e.want(exitOK, "doctor", e.ledger)
	if !strings.Contains(out, "0 pending") || strings.Contains(out, "catch-up cursor") {
		t.Fatalf("doctor after the resolve:\n%s", out)
	}
}

// TestCatchUpNoneSaysWhenARetryHappens: with --catch-up none a failed
// period is retried only while it is the latest due period; the run says so.
func TestCatchUpNoneSaysWhenARetryHappens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	_, stderr := e.want(exitFailed, "run", "--job", "report", "--tz", "UTC", "--catch-up", "none", "--max-attempts", "1", "--", "false")
	if !strings.Contains(stderr, "only while it is the latest due period") {
		t.Fatalf("--catch-up none, parked:\n%s", stderr)
	}
	_, stderr = e.want(exitFailed, "run", "--job", "all", "--tz", "UTC", "--max-attempts", "1", "--", "false")
	if strings.Contains(stderr, "latest due period") {
		t.Fatalf("--catch-up all, parked:\n%s", stderr)
	}
}

// TestRunDefaultsFollowTheLibrary: idem run's retry flags default to the
// library's defaults.
func TestRunDefaultsFollowTheLibrary(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	out, _ := e.want(exitOK, "run", "--help")
	for _, want := range []string{
		fmt.Sprintf(`--max-attempts int\s[^\n]*\(default %d\)\n`, idem.DefaultMaxAttempts),
		fmt.Sprintf(`--retry-within duration\s[^\n]*\(default %s\)\n`, regexp.QuoteMeta(idem.DefaultRetryWithin.String())),
		`--backoff duration\s[^\n]*at most 10m or this value if larger \(default 1s\)\n`, // idem.DefaultBackoffCap
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("idem run --help does not match %q:\n%s", want, out)
		}
	}
}

// TestClockSkipNeedsNow: $IDEM_CLOCK is a test seam that only works with
// $IDEM_NOW and only knows "skip".
func TestClockSkipNeedsNow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ now, clock string }{{"", "skip"}, {"2026-10-28T02:00:00Z", "fast"}} {
		e := newEnv(t, c.now)
		e.clock = c.clock
		if _, stderr, code := e.idem(runArgs()...); code != exitUsage || !strings.Contains(stderr, "IDEM_CLOCK") {
			t.Errorf("IDEM_NOW=%q IDEM_CLOCK=%q: exit %d, want %d naming $IDEM_CLOCK\n%s", c.now, c.clock, code, exitUsage, stderr)
		}
	}
}

// TestClockSkipKeepsTheHeartbeatReal: under $IDEM_CLOCK=skip, a command
// that runs across many heartbeat periods (a third of --lease each) does
// not move idem's clock: the heartbeat waits in real time while an attempt
// holds its period, and the done mark is written at $IDEM_NOW.
func TestClockSkipKeepsTheHeartbeatReal(t *testing.T) {
	e := newEnv(t, "2026-10-28T02:00:00Z")
	e.clock = "skip"
	e.want(exitOK, "run", "--job", "hb", "--tz", "UTC", "--lease", "30ms", "--", "sh", "-c", `sleep 0.3; echo ran >> out.txt`)
	out, _ := e.want(exitOK, "show", "hb", "2026-10-27", "--json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Status != "done" || rec.Attempt != 1 || rec.Updated == nil || !rec.Updated.Equal(mustTime(t, e.now)) {
		t.Fatalf("record %+v: want done by attempt 1 at %s (the clock did not move while the command ran)", rec, e.now)
	}
	if got := e.lines("out.txt"); !equal(got, []string{"ran"}) {
		t.Fatalf("out.txt = %q", got)
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOutageHealsWithoutAPerson: with the defaults, a 30-minute outage of
// the downstream from 02:00 heals by itself. cron triggers `idem run` every
// 5 minutes; while the command fails, each run retries within about a
// minute of idem's clock ($IDEM_CLOCK=skip moves it instead of sleeping),
// then exits 1 saying until when it backs off, after which attempt and why
// (the same when it finds an earlier run's backoff, without running the
// command); the period is never parked, and the first run after the outage
// that the backoff allows does it, once.
func TestOutageHealsWithoutAPerson(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.clock = "skip"
	down := filepath.Join(e.dir, "down")
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--job", "settle", "--tz", "UTC", "--",
		"sh", "-c", `if [ -e down ]; then echo "$IDEM_ATTEMPT" >> failed.txt; exit 1; fi; echo "$IDEM_PERIOD $IDEM_ATTEMPT" >> out.txt`}
	start := time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC)
	healed := start.Add(30 * time.Minute)
	for trig := start; !trig.After(healed.Add(30 * time.Minute)); trig = trig.Add(5 * time.Minute) {
		if !trig.Before(healed) {
			os.Remove(down)
		}
		e.now = trig.Format(time.RFC3339)
		failedBefore := len(e.lines("failed.txt"))
		_, stderr, code := e.idem(args...)
		failedNow := len(e.lines("failed.txt")) - failedBefore
		out, _ := e.want(exitOK, "show", "settle", "2026-10-27", "--json")
		var rec recordJSON
		if err := json.Unmarshal([]byte(out), &rec); err != nil {
			t.Fatal(err)
		}
		at := trig.Format("15:04")
		if rec.Updated == nil || rec.Updated.After(trig.Add(time.Minute)) {
			t.Fatalf("%s: the record was last written at %v, more than a minute after the run started", at, rec.Updated)
		}
		switch rec.Status {
		case "done":
			if code != exitOK && code != exitDone {
				t.Fatalf("%s: exit %d with the period done\n%s", at, code, stderr)
			}
		case "failed":
			want := regexp.MustCompile(`^idem: settle 2026-10-27: backing off until \S+ after attempt (\d+) failed: command exited with status 1\n`)
			m := want.FindStringSubmatch(stderr)
			if code != exitFailed || m == nil || strings.Contains(stderr, "failed (attempt") {
				t.Fatalf("%s: exit %d, stderr:\n%s\nwant exit %d and %q", at, code, stderr, exitFailed, want)
			}
			if m[1] != fmt.Sprint(rec.Attempt) {
				t.Fatalf("%s: says attempt %s failed, the record's last attempt is %d", at, m[1], rec.Attempt)
			}
			if failedNow == 0 && rec.NotBefore != nil && !rec.NotBefore.After(trig) {
				t.Fatalf("%s: the backoff had ended at %v, but the run did not retry", at, rec.NotBefore)
			}
		default:
			t.Fatalf("%s: the period is %s (exit %d)\n%s", at, rec.Status, code, stderr)
		}
		t.Logf("%s: exit %d, %d attempts failed now, record %s attempt %d failures %d", at, code, failedNow, rec.Status, rec.Attempt, rec.Failures)
	}
	if got := e.lines("out.txt"); len(got) != 1 || !strings.HasPrefix(got[0], "2026-10-27 ") {
		t.Fatalf("out.txt = %q, want the period done once", got)
	}
}

// TestLsLimitShowsNewest: 'idem ls --limit N' lists the last N records of
// the listing (job, then period, oldest first): with --job, the job's N
// newest periods, not its oldest. With --status pending it keeps the last
// N pending ones.
func TestLsLimitShowsNewest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	l, err := idem.OpenLedger(e.ledger)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, day := range []string{"2026-10-23", "2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"} {
		if err := l.Run(ctx, idem.Key{Job: "settle", Period: day}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, day := range []string{"2026-10-20", "2026-10-21", "2026-10-22"} {
		_ = l.Run(ctx, idem.Key{Job: "mail", Period: day}, func(context.Context) error { return errors.New("smtp down") },
			idem.WithBackoff(idem.Constant(time.Hour)))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	periods := func(args ...string) string {
		out, _ := e.want(exitOK, append([]string{"ls", "--json"}, args...)...)
		var recs []recordJSON
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatalf("ls --json %v: %v\n%s", args, err, out)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Job+"/"+r.Period)
		}
		return strings.Join(got, " ")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--job", "settle", "--limit", "2"}, "settle/2026-10-26 settle/2026-10-27"},
		{[]string{"--job", "settle", "--limit", "9"}, "settle/2026-10-23 settle/2026-10-24 settle/2026-10-25 settle/2026-10-26 settle/2026-10-27"},
		{[]string{"--status", "pending", "--limit", "2"}, "mail/2026-10-21 mail/2026-10-22"},
		{[]string{"--limit", "1"}, "settle/2026-10-27"},
	} {
		if got := periods(c.args...); got != c.want {
			t.Errorf("ls %v: %s, want %s", c.args, got, c.want)
		}
	}
}
