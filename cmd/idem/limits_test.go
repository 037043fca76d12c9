//go:build unix

package main

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/idemgo/idem/internal/testwait"
)

// TestRunAtOnce: 'idem run --at-once db=1' of another job does not start
// while a run holding the only place runs; once that run's process is
// killed (SIGKILL), its place comes back at once (a process of this host,
// its lease 10 minutes) and the waiting run runs.
func TestRunAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	holder := e.started("--at-once", "db=1", "--lease", "10m")
	// report's command notes whether the holder still runs (a zombie,
	// killed but not reaped yet, does not).
	cmd := e.command("run", "--ledger", e.ledger, "--job", "report", "--tz", "UTC", "--at-once", "db=1", "--",
		"sh", "-c", fmt.Sprintf(`s=$(cut -d' ' -f3 /proc/%d/stat 2>/dev/null); if [ -n "$s" ] && [ "$s" != Z ]; then echo "report while held" >> out.txt; fi; echo report >> out.txt`, holder.Process.Pid))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once report has its ledger open, give it the time it would take to
	// run, were it not waiting: while the holder runs, it must not.
	fd := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "fd")
	testwait.Until(t, func() bool {
		ents, _ := os.ReadDir(fd)
		for _, ent := range ents {
			if dst, _ := os.Readlink(filepath.Join(fd, ent.Name())); dst == e.ledger {
				return true
			}
		}
		return false
	}, "the waiting run to open the ledger (%s)", fd)
	time.Sleep(500 * time.Millisecond) // not a condition: time for a run that does not wait to run
	if got := e.lines("out.txt"); len(got) != 1 || !strings.HasPrefix(got[0], "2026-10-27 1 ") {
		t.Fatalf("out.txt while the holder runs: %q; want only the holder's line", got)
	}
	_ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
	if err := e.finish(cmd, &stderr); err != nil {
		t.Fatalf("the waiting run: %v\n%s", err, stderr.String())
	}
	if got := e.lines("out.txt"); len(got) != 2 || got[1] != "report" { // and no "report while held"
		t.Fatalf("out.txt: %q; want the holder's line, then report", got)
	}
}

// TestLimitFlagsRefused: a bad --rate or --at-once is a usage error naming
// the flag; one name given two meanings on a crontab's lines is refused
// by --check, naming the lines.
func TestLimitFlagsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "2026-10-28T02:00:00Z")
	for _, bad := range [][]string{
		{"--rate", "mail"}, {"--rate", "mail=0"}, {"--rate", "mail=200,0"}, {"--rate", "=1"},
		{"--at-once", "db=0"}, {"--at-once", "db"}, {"--rate", "a\nb=1"},
	} {
		args := append(append([]string{"run", "--job", "x", "--tz", "UTC"}, bad...), "--", "true")
		_, stderr := e.want(exitUsage, args...)
		if !strings.Contains(stderr, bad[0]) {
			t.Errorf("%q: stderr %q does not name %s", bad, stderr, bad[0])
		}
	}
	_, stderr := e.want(exitUsage, "run", "--job", "x", "--tz", "UTC", "--rate", "db=1", "--at-once", "db=1", "--", "true")
	if !strings.Contains(stderr, "limit db is rate db=1,1 and at-once db=1") {
		t.Errorf("one name, two meanings: %q", stderr)
	}
	_, stderr = e.want(exitUsage, "run", "--job", "x", "--tz", "UTC", "--at-once", "db=1", "--lease", "500ms", "--", "true")
	if !strings.Contains(stderr, "--lease 500ms is under a second") {
		t.Errorf("--at-once with a lease under a second: %q", stderr)
	}
	stdout, stderr, code := e.serveCheck("daily a rate:mail=200,20 true\ndaily b rate:mail=100 true\n")
	if code != exitUsage || !strings.Contains(stderr, "crontab:2: rate:mail=100: limit mail is rate mail=200,20 on line 1") {
		t.Errorf("--check of a limit with two meanings: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := e.serveCheck("daily a rate:mail=200,20 at-once:db=2 true\ndaily b rate:mail=200,20 true\n"); code != exitOK {
		t.Errorf("--check of good limits: exit %d\n%s", code, stderr)
	}
}

// serveCheck runs 'idem serve --check' on a crontab of text.
func (e *env) serveCheck(text string) (stdout, stderr string, code int) {
	e.t.Helper()
	path := filepath.Join(e.dir, "crontab")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return e.idem("serve", "--check", path)
}
