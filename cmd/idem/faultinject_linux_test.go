package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/faultinj"
)

// cliFaults: each system call and the errors it is made to fail with (the
// root module's TestFaultInjection has the same list; no rename: the
// ledger renames nothing).
var cliFaults = []struct {
	syscalls []string
	errnos   []string
}{
	{[]string{"fsync"}, []string{"EIO"}},
	{[]string{"fdatasync"}, []string{"EIO"}},
	{[]string{"write"}, []string{"ENOSPC", "EIO"}},
	{[]string{"pwrite64"}, []string{"ENOSPC", "EIO"}},
	{[]string{"open", "openat"}, []string{"EMFILE", "EACCES"}},
	{[]string{"ftruncate"}, []string{"EIO"}},
}

const (
	cliMaxWhen    = 12
	cliChildLimit = time.Minute
)

// cliCase is one injected `idem run` and what it found.
type cliCase struct {
	mode   string
	target string
	inj    faultinj.Injection

	code         int
	hit          bool
	fired        []faultinj.Call
	died         string
	falseSuccess string
	inconsistent string
	notCompleted string
}

func (c *cliCase) name() string { return fmt.Sprintf("%s/%s/%s", c.mode, c.target, c.inj) }

// TestRunFaultInjection runs `idem run` (both modes) on a SQLite ledger
// under strace, with one system call on one of the ledger's files (the
// database, its -wal and -shm, its directory) failing at one occurrence,
// for every occurrence of every call of cliFaults. After each run, from a
// clean process: exit 0 only if no write or sync of the -wal (or sync of
// the directory that holds it) failed before the -wal's last successful
// sync, which would make the done mark depend on pages the kernel may have
// dropped (a failed sync of the directory counts unless one succeeded
// before it); the period is done if it exited 0; the ledger passes
// integrity_check; the next `idem run` settles the period (exit 0, or 3 if
// it was done already; at-most-once: or unknown; never COMMAND twice).
//
// strace counts occurrences per thread, and idem does its file work on any
// of its threads: "when=N" fails the N-th call on the traced paths of every
// thread, found by a run without a fault. Which calls failed is read back
// from strace's output.
func TestRunFaultInjection(t *testing.T) {
	if err := faultinj.Available(); err != nil {
		t.Skipf("fault injection needs strace: %v", err)
	}
	if testing.Short() {
		t.Skip("-short: the fault-injection test runs a hundred idem processes")
	}
	start := time.Now()
	tmpl := newEnv(t, "2026-10-28T02:00:00Z")
	tmpl.want(exitOK, runArgs()...)
	ledger, err := os.ReadFile(tmpl.ledger)
	if err != nil {
		t.Fatal(err)
	}
	prepare := func() *env {
		e := newEnv(t, "2026-10-29T02:00:00Z")
		if err := os.WriteFile(e.ledger, ledger, 0o644); err != nil {
			t.Fatal(err)
		}
		return e
	}
	var all []string
	for _, f := range cliFaults {
		all = append(all, f.syscalls...)
	}
	var cases []cliCase
	for _, mode := range []string{"at-least-once", "at-most-once"} {
		e := prepare()
		targets := cliTargets(e)
		code, calls, out, err := e.strace(mode, all, slices.Collect(mapValues(targets)), nil)
		if err != nil || code != exitOK {
			t.Fatalf("idem run --mode %s without a fault: exit %d, %v\n%s", mode, code, err, out)
		}
		// For each target but the -wal, its calls are counted among the
		// calls on it and on the -wal (both are traced, see cliStrace).
		var summary []string
		for _, name := range []string{"db", "wal", "shm", "dir"} {
			for _, f := range cliFaults {
				for _, sc := range f.syscalls {
					whens := map[int]bool{}
					index := map[int]int{}
					n := 0
					for _, c := range calls {
						tg := cliTargetOf(c, targets)
						if c.Syscall != sc || (tg != name && tg != "wal") {
							continue
						}
						index[c.TID]++
						if tg == name && index[c.TID] <= cliMaxWhen {
							whens[index[c.TID]] = true
							n++
						}
					}
					if n == 0 {
						continue
					}
					summary = append(summary, fmt.Sprintf("%s %s×%d", name, sc, n))
					for _, errno := range f.errnos {
						for _, when := range sortedKeys(whens) {
							cases = append(cases, cliCase{mode: mode, target: name, inj: faultinj.Injection{Syscall: sc, Errno: errno, When: when}})
						}
					}
				}
			}
		}
		t.Logf("idem run --mode %s: calls on the ledger's files without a fault: %s", mode, strings.Join(summary, ", "))
	}
	t.Logf("%d injected runs planned (%s)", len(cases), time.Since(start).Round(time.Millisecond))

	envs := make([]*env, len(cases))
	for i := range envs {
		envs[i] = prepare()
	}
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cliRunCase(&cases[i], envs[i])
		}()
	}
	wg.Wait()

	type agg struct{ runs, hit, ok, falseOK, inconsistent, incomplete, died int }
	sums := map[string]*agg{}
	for i := range cases {
		c := &cases[i]
		k := fmt.Sprintf("%s %s %s %s", c.mode, c.target, c.inj.Syscall, c.inj.Errno)
		if sums[k] == nil {
			sums[k] = &agg{}
		}
		a := sums[k]
		a.runs++
		if c.hit {
			a.hit++
		}
		if c.code == exitOK && c.died == "" {
			a.ok++
		}
		if c.died != "" {
			a.died++
			t.Logf("%s: %s", c.name(), c.died)
		}
		if c.falseSuccess != "" {
			a.falseOK++
			t.Errorf("FALSE SUCCESS %s: %s", c.name(), c.falseSuccess)
		}
		if c.inconsistent != "" {
			a.inconsistent++
			t.Errorf("INCONSISTENT %s: %s (exit %d)", c.name(), c.inconsistent, c.code)
		}
		if c.notCompleted != "" {
			a.incomplete++
			t.Errorf("NOT COMPLETED %s: %s (exit %d)", c.name(), c.notCompleted, c.code)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %5s %5s %5s %6s %6s %6s %5s\n", "mode target syscall errno", "runs", "hit", "exit0", "false", "incons", "incomp", "died")
	for _, k := range sortedKeys(sums) {
		a := sums[k]
		fmt.Fprintf(&b, "%-40s %5d %5d %5d %6d %6d %6d %5d\n", k, a.runs, a.hit, a.ok, a.falseOK, a.inconsistent, a.incomplete, a.died)
	}
	t.Logf("per mode, target, call and error:\n%s", b.String())
	t.Logf("fault injection of idem run took %s", time.Since(start).Round(time.Millisecond))
}

func sortedKeys[K interface{ ~int | ~string }, V any](m map[K]V) []K {
	var ks []K
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, k := range sortedKeys(m) {
			if !yield(m[k]) {
				return
			}
		}
	}
}

// cliTargets are the ledger's files, by name.
func cliTargets(e *env) map[string]string {
	return map[string]string{"db": e.ledger, "wal": e.ledger + "-wal", "shm": e.ledger + "-shm", "dir": e.dir}
}

func cliTargetOf(c faultinj.Call, targets map[string]string) string {
	for _, p := range c.Paths {
		for name, path := range targets {
			if p == path {
				return name
			}
		}
	}
	return ""
}

// strace runs `idem run` in mode under strace, tracing syscalls on paths
// and failing inj if it is not nil: its exit code, the calls and its output.
func (e *env) strace(mode string, syscalls, paths []string, inj *faultinj.Injection) (int, []faultinj.Call, string, error) {
	idemCmd := e.command(append([]string{"run", "--ledger", e.ledger}, runArgs("--mode", mode)[1:]...)...)
	trace := filepath.Join(e.dir, "strace.out")
	cmd := exec.Command("strace", faultinj.Args(trace, syscalls, paths, inj, idemCmd.Args...)...)
	cmd.Dir, cmd.Env = idemCmd.Dir, append(idemCmd.Env, "GOTRACEBACK=all")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, nil, "", err
	}
	timer := time.AfterFunc(cliChildLimit, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	werr := cmd.Wait()
	killed := !timer.Stop()
	calls, perr := faultinj.Parse(trace)
	if perr != nil {
		return 0, nil, out.String(), perr
	}
	if killed {
		return 0, calls, out.String(), fmt.Errorf("killed after %s: %v", cliChildLimit, werr)
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return 0, calls, out.String(), nil
	case errors.As(werr, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), calls, out.String(), nil
	}
	return 0, calls, out.String(), werr
}

func cliRunCase(c *cliCase, e *env) {
	targets := cliTargets(e)
	// The -wal is traced too, for its successful syncs; fsync and
	// fdatasync are traced for them.
	paths := []string{targets[c.target]}
	if c.target != "wal" {
		paths = append(paths, targets["wal"])
	}
	syscalls := []string{c.inj.Syscall}
	for _, sc := range []string{"fsync", "fdatasync"} {
		if sc != c.inj.Syscall {
			syscalls = append(syscalls, sc)
		}
	}
	code, calls, out, err := e.strace(c.mode, syscalls, paths, &c.inj)
	c.code = code
	if err != nil {
		c.died = fmt.Sprintf("%v\n%s", err, out)
		return
	}
	var lastSync time.Time // the -wal's last successful sync
	var firstDir time.Time // the directory's first successful sync
	for _, call := range calls {
		tg := cliTargetOf(call, targets)
		if tg == "wal" && strings.Contains(call.Syscall, "sync") && call.Ret == "0" {
			lastSync = call.Time
		}
		if tg == "dir" && strings.Contains(call.Syscall, "sync") && call.Ret == "0" && firstDir.IsZero() {
			firstDir = call.Time
		}
	}
	var lost []faultinj.Call
	for _, call := range calls {
		if !call.Injected {
			continue
		}
		c.fired = append(c.fired, call)
		tg := cliTargetOf(call, targets)
		c.hit = c.hit || tg == c.target
		// A failed sync of the directory after one that succeeded (SQLite
		// syncs it at the first sync of every -wal it opens) loses nothing.
		relevant := (tg == "wal" && (strings.Contains(call.Syscall, "sync") || strings.Contains(call.Syscall, "write"))) ||
			(tg == "dir" && (strings.Contains(call.Syscall, "sync") || strings.HasPrefix(call.Syscall, "open")) &&
				(firstDir.IsZero() || call.Time.Before(firstDir)))
		if relevant && call.Time.Before(lastSync) {
			lost = append(lost, call)
		}
	}
	if len(c.fired) == 0 {
		return
	}
	if code == exitOK && len(lost) > 0 {
		c.falseSuccess = fmt.Sprintf("exit 0 after %v, before the -wal's last successful sync; output:\n%s", lost, out)
	}
	c.inconsistent, c.notCompleted = cliCheck(e, c.mode, code == exitOK, &c.falseSuccess)
}

// cliCheck opens the ledger cleanly: it must be consistent and hold the
// period done if idem exited 0; then the next `idem run` must settle it.
func cliCheck(e *env, mode string, reported bool, falseSuccess *string) (inconsistent, notCompleted string) {
	key := idem.Key{Job: "settle", Period: "2026-10-28"}
	status := func() (string, string) {
		l, err := idem.OpenLedger(e.ledger)
		if err != nil {
			return "", "open: " + err.Error()
		}
		defer l.Close()
		var check string
		if err := l.DB().QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
			return "", fmt.Sprintf("integrity_check: %q, %v", check, err)
		}
		rec, found, err := l.Lookup(context.Background(), key)
		if err != nil {
			return "", "lookup: " + err.Error()
		}
		if !found {
			return "none", ""
		}
		return string(rec.Status), ""
	}
	st, bad := status()
	if bad != "" {
		return bad, ""
	}
	if reported && st != string(idem.StatusDone) && *falseSuccess == "" {
		*falseSuccess = "exit 0, the ledger says " + st
	}
	idemCmd := e.command(append([]string{"run", "--ledger", e.ledger}, runArgs("--mode", mode)[1:]...)...)
	var out strings.Builder
	idemCmd.Stdout, idemCmd.Stderr = &out, &out
	code := 0
	if err := idemCmd.Start(); err != nil {
		return "", err.Error()
	}
	var ee *exec.ExitError
	if err := waitLimit(idemCmd, cliChildLimit); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return "", fmt.Sprintf("the next run: %v\n%s", err, out.String())
	}
	st2, bad := status()
	switch {
	case bad != "":
		return "after the next run: " + bad, ""
	case mode == "at-most-once" && code == exitUnknown && st2 == string(idem.StatusUnknown):
	case (code != exitOK && code != exitDone) || st2 != string(idem.StatusDone):
		notCompleted = fmt.Sprintf("the next run: exit %d, the ledger says %s\n%s", code, st2, out.String())
	}
	if n := len(e.lines("out.txt")); mode == "at-most-once" && n > 1 {
		notCompleted += fmt.Sprintf("; COMMAND ran %d times", n)
	}
	return "", notCompleted
}

// waitLimit waits for cmd, killing it after d.
func waitLimit(cmd *exec.Cmd, d time.Duration) error {
	timer := time.AfterFunc(d, func() { cmd.Process.Kill() })
	defer timer.Stop()
	return cmd.Wait()
}
