//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServeCheck(t *testing.T) {
	e := newEnv(t, "")
	for _, tc := range []struct {
		name, file, want string
	}{
		{"fields", "# x\n\n* * * * tick true\n", "crontab:3: want MIN HOUR DOM MON DOW JOB COMMAND"},
		{"spec", "61 * * * * tick true\n", `crontab:1: "61 * * * *" is not a 5-field cron expression`},
		{"zone", "CRON_TZ=Mars/Olympus\n* * * * * tick true\n", "crontab:1: CRON_TZ=Mars/Olympus: not a time zone"},
		{"setting", "MAILTO=ops\n", "crontab:1: MAILTO=: the only setting is CRON_TZ="},
		{"quote", "* * * * * tick sh -c 'echo\n", "crontab:1: unterminated single quote"},
		{"duplicate", "* * * * * tick true\n0 * * * * tick true\n", "crontab:2: job tick is on line 1 already"},
		{"empty", "# nothing\n", "crontab: no job lines"},
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

// TestServeRealTime runs three `idem serve` processes on one ledger with a
// job every minute, for three minutes of real time: each minute's line is
// in the file once, none is missing. It runs in parallel with the other
// tests: it mostly waits.
func TestServeRealTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	out := filepath.Join(e.dir, "ticks")
	crontab := filepath.Join(e.dir, "crontab")
	line := fmt.Sprintf("* * * * * tick sh -c 'echo $IDEM_PERIOD >> %s'\n", out)
	if err := os.WriteFile(crontab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var errs []*bytes.Buffer
	for range 3 {
		cmd := e.command("serve", "--ledger", e.ledger, "--crontab", crontab, "--tz", "UTC")
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		cmds, errs = append(cmds, cmd), append(errs, &b)
	}
	// Three minutes of real time, which cross three minute boundaries:
	// the minute running at the start and at least three more.
	const minutes = 4
	start := time.Now()
	deadline := start.Add(minutes*time.Minute + 90*time.Second)
	if dl, ok := t.Deadline(); ok && dl.Add(-30*time.Second).Before(deadline) {
		deadline = dl.Add(-30 * time.Second)
	}
	var ticks []string
	for {
		b, _ := os.ReadFile(out)
		ticks = strings.Fields(string(b))
		if time.Since(start) >= 3*time.Minute && len(slices.Compact(slices.Sorted(slices.Values(ticks)))) >= minutes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TestServeRealTime: gave up at %s waiting for %d minutes of ticks from 3 idem serve processes; %s has %q; their output:\n%s\n%s\n%s",
				time.Now().UTC().Format(time.RFC3339), minutes, out, ticks, errs[0], errs[1], errs[2])
		}
		time.Sleep(250 * time.Millisecond) // a poll of the file
	}
	for _, cmd := range cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, cmd := range cmds {
		if err := e.finish(cmd, errs[i]); err != nil {
			t.Errorf("idem serve %d after SIGTERM: %v; its output:\n%s", i, err, errs[i])
		}
	}
	b, _ := os.ReadFile(out)
	ticks = strings.Fields(string(b))
	seen := map[string]bool{}
	var first time.Time
	for _, tick := range ticks {
		if seen[tick] {
			t.Errorf("minute %s ran twice; ticks: %q", tick, ticks)
		}
		seen[tick] = true
		m, err := time.Parse("2006-01-02T15:04Z", tick)
		if err != nil {
			t.Fatalf("tick %q: %v", tick, err)
		}
		if first.IsZero() || m.Before(first) {
			first = m
		}
	}
	for i := range len(seen) {
		if m := first.Add(time.Duration(i) * time.Minute).Format("2006-01-02T15:04Z"); !seen[m] {
			t.Errorf("minute %s is missing; ticks: %q", m, ticks)
		}
	}
	if len(seen) < minutes {
		t.Errorf("%d minutes in 3 minutes of real time, want at least %d: %q", len(seen), minutes, ticks)
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
		cmd := e.command("serve", "--ledger", e.ledger, "--crontab", crontab)
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
