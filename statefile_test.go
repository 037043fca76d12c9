package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testwait"
)

func TestStateFileWatermark(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openState(t, dir)
	ctx := context.Background()
	report := idem.Key{Job: "daily_report", Period: "2026-10-27"}
	sent := 0
	for range 3 {
		if err := s.Run(ctx, report, func(context.Context) error { sent++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if sent != 1 {
		t.Fatalf("sent %d, want 1", sent)
	}
	b, _ := os.ReadFile(s.Path())
	for _, want := range []string{`"version": 2`, `"lastDonePeriod": "2026-10-27"`, `"status": "done"`, `"pendingPeriod": ""`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("state file lacks %s:\n%s", want, b)
		}
	}
	// Below the watermark: done. A new period runs.
	var res idem.Result
	if err := s.Run(ctx, idem.Key{Job: "daily_report", Period: "2026-10-20"}, func(context.Context) error { sent++; return nil }, idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("older period: %v, %v", err, res.Outcome)
	}
	if err := s.Run(ctx, idem.Key{Job: "daily_report", Period: "2026-10-28"}, func(context.Context) error { sent++; return nil }); err != nil || sent != 2 {
		t.Fatalf("next period: %v, sent %d", err, sent)
	}
	// A period of another shape would break string order.
	err := s.Run(ctx, idem.Key{Job: "daily_report", Period: "2026-10-9"}, func(context.Context) error { sent++; return nil })
	if !errors.Is(err, idem.ErrOutOfOrder) || !strings.Contains(err.Error(), "zero-padded") || sent != 2 {
		t.Fatalf("misshapen period: %v", err)
	}
	// Jobs are independent.
	if err := s.Run(ctx, idem.Key{Job: "im_push", Period: "2026-10-01"}, func(context.Context) error { sent++; return nil }); err != nil || sent != 3 {
		t.Fatalf("second job: %v", err)
	}
}

func TestStateFilePendingBlocksLaterPeriods(t *testing.T) {
	t.Parallel()
	s := openState(t, t.TempDir())
	ctx := context.Background()
	k1 := idem.Key{Job: "pay", Period: "2026-10-27"}
	if err := s.Run(ctx, k1, func(context.Context) error { return errors.New("timeout") }, idem.AtMostOnce()); !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("k1: %v", err)
	}
	k2 := idem.Key{Job: "pay", Period: "2026-10-28"}
	err := s.Run(ctx, k2, func(context.Context) error { t.Error("k2 ran past an unknown k1"); return nil }, idem.AtMostOnce())
	if !errors.Is(err, idem.ErrOutOfOrder) || !strings.Contains(err.Error(), "2026-10-27") {
		t.Fatalf("k2: %v", err)
	}
	if err := s.Resolve(ctx, k1, idem.ResolveDone); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, k2, func(context.Context) error { return nil }, idem.AtMostOnce()); err != nil {
		t.Fatalf("k2 after resolving k1: %v", err)
	}
}

// TestStateFileLockAcrossProcesses: a child holds the job's lock in fn; the
// parent sees ErrInProgress. The child is SIGKILLed; the kernel drops the
// lock and the parent recovers at once, without waiting for a lease.
func TestStateFileLockAcrossProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	child := idemtest.Start(t, dir, func(dir string) {
		s := openState(t, dir)
		_ = s.Run(context.Background(), key, func(context.Context) error {
			os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
			select {} // hold the lock until killed
		}, idem.AtMostOnce())
	})
	testwait.Until(t, func() bool { _, err := os.Stat(ready); return err == nil }, "the child to take the lock (%s)", ready)
	s := openState(t, dir)
	ran := false
	err := s.Run(context.Background(), key, func(context.Context) error { ran = true; return nil }, idem.AtMostOnce())
	if !errors.Is(err, idem.ErrInProgress) || ran {
		t.Fatalf("while the child holds the lock: %v", err)
	}
	child.Kill()
	if e := child.Wait(); !e.Killed {
		t.Fatalf("child: %+v", e)
	}
	err = s.Run(context.Background(), key, func(context.Context) error { ran = true; return nil }, idem.AtMostOnce())
	if !errors.Is(err, idem.ErrUnknownOutcome) || ran {
		t.Fatalf("after the kill: %v, ran %v; want ErrUnknownOutcome (fn may have acted)", err, ran)
	}
}

// TestStateFileCrashAtEveryPoint SIGKILLs a child at each crash point of
// the state file in each mode, then recovers in this process.
func TestStateFileCrashAtEveryPoint(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"at-least-once", "at-most-once", "two-phase"} {
		for _, p := range idemstore.Points() {
			t.Run(mode+"/"+string(p), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				job := func(ctx context.Context, dir string) error {
					s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"))
					if err != nil {
						return err
					}
					eff := newEffects(dir)
					opt := map[string]idem.Option{
						"at-least-once": idem.AtLeastOnce(),
						"at-most-once":  idem.AtMostOnce(),
						"two-phase": idem.TwoPhase(func(_ context.Context, k idem.Key) (bool, error) {
							return eff.Counts(t)[k.String()] > 0, nil
						}),
					}[mode]
					return s.Run(ctx, key, func(context.Context) error { eff.Add(nil, key.String()); return nil }, opt)
				}
				exit := idemtest.Fork(t, dir, func(dir string) {
					if err := job(idemtest.KillAt(context.Background(), p), dir); err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
				})
				reached := exit.Killed
				if !reached && exit.Code != 0 {
					t.Fatalf("child: %+v", exit)
				}
				err := job(context.Background(), dir)
				n := newEffects(dir).Counts(t)[key.String()]
				rec := mustLookup(t, openState(t, dir), key)
				switch mode {
				case "at-least-once":
					if err != nil || rec.Status != idem.StatusDone || n < 1 {
						t.Fatalf("%v, %s, effects %d", err, rec.Status, n)
					}
				case "at-most-once":
					if n > 1 || (rec.Status == idem.StatusUnknown) != errors.Is(err, idem.ErrUnknownOutcome) ||
						(rec.Status == idem.StatusDone && n != 1) {
						t.Fatalf("%v, %s, effects %d", err, rec.Status, n)
					}
				case "two-phase":
					if err != nil || rec.Status != idem.StatusDone || n != 1 {
						t.Fatalf("%v, %s, effects %d; want done, exactly 1", err, rec.Status, n)
					}
				}
				t.Logf("killed at %s: %v; recovery %v, status %s, effects %d", p, reached, err, rec.Status, n)
			})
		}
	}
}

func TestStateFileCorrupt(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"empty":         "",
		"whitespace":    "  \n",
		"truncated":     `{"version": 1, "jobs": {"daily_report": {"lastDonePeriod": "2026-10-2`,
		"garbage":       "\x00\x01not json",
		"wrong shape":   `{"version": 1, "jobs": ["daily_report"]}`,
		"unknown field": `{"version": 1, "jobs": {}, "extra": true}`,
		"no version":    `{"jobs": {}}`,
		"newer version": `{"version": 3, "jobs": {}}`,
		"bad status":    `{"version": 1, "jobs": {"j": {"lastDonePeriod": "2026-10-27", "status": "sent", "pendingPeriod": "", "attempt": 1, "failures": 0}}}`,
		"two documents": `{"version": 1, "jobs": {}} {}`,
		"null job":      `{"version": 1, "jobs": {"j": null}}`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := idem.OpenStateFile(path)
			if !errors.Is(err, idem.ErrCorruptState) || !strings.Contains(err.Error(), path) {
				t.Fatalf("OpenStateFile: %v; want ErrCorruptState naming %s", err, path)
			}
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Fatalf("corrupt file was changed to %q", b)
			}
		})
	}
	// A file that turns corrupt under an open store: Run reports it and writes nothing.
	dir := t.TempDir()
	s := openState(t, dir)
	if err := os.WriteFile(s.Path(), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := s.Run(context.Background(), key, func(context.Context) error { t.Error("fn ran on a corrupt state"); return nil })
	if !errors.Is(err, idem.ErrCorruptState) {
		t.Fatalf("Run: %v", err)
	}
	if b, _ := os.ReadFile(s.Path()); string(b) != "{" {
		t.Fatalf("corrupt file was changed to %q", b)
	}
}

func TestRepairStateFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte(`{"version": 1, "jobs": {"daily_rep`), 0o644); err != nil {
		t.Fatal(err)
	}
	kept, err := idem.RepairStateFile(path, map[string]string{"daily_report": "2026-10-27"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(kept); string(b) != `{"version": 1, "jobs": {"daily_rep` {
		t.Fatalf("the corrupt file was not kept: %q", b)
	}
	s := openState(t, dir)
	var res idem.Result
	if err := s.Run(context.Background(), idem.Key{Job: "daily_report", Period: "2026-10-27"}, func(context.Context) error { return nil }, idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("after repair: %v %v", err, res.Outcome)
	}
	if _, err := idem.RepairStateFile(path, nil); err == nil || !strings.Contains(err.Error(), "not corrupt") {
		t.Fatalf("repair of a good file: %v", err)
	}
}

func TestOpenStateFileBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	regular := filepath.Join(dir, "file")
	os.WriteFile(regular, []byte("x"), 0o644)
	for _, c := range []struct{ path, want string }{
		{dir, "is a directory"},
		{filepath.Join(regular, "state.json"), "not a directory"},
		{filepath.Join(dir, "missing", "state.json"), "no such file"},
		{"", "empty"},
	} {
		if _, err := idem.OpenStateFile(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenStateFile(%q): %v, want %q", c.path, err, c.want)
		}
	}
	// A directory that cannot be written: the write fails with a clear error.
	s, err := idem.OpenStateFile("/proc/idem-state.json")
	if err == nil {
		err = s.Run(context.Background(), key, func(context.Context) error { return nil })
	}
	if err == nil || !strings.Contains(err.Error(), "/proc/idem-state.json") {
		t.Fatalf("state file in /proc: %v", err)
	}
}

func TestStateFileInvalidKey(t *testing.T) {
	t.Parallel()
	s := openState(t, t.TempDir())
	err := s.Run(context.Background(), idem.Key{Job: "j\n", Period: "2026-10-27"}, func(context.Context) error { return nil })
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Fatal("an invalid key wrote the state file")
	}
}

// TestStateFileManyJobsManyProcesses: processes working different jobs of
// one state file at once must not undo each other's writes (every write
// re-reads the file under a file-wide lock).
func TestStateFileManyJobsManyProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var children []*idemtest.Child
	for i := range 4 {
		children = append(children, idemtest.Start(t, fmt.Sprintf("%d:%s", i, dir), func(arg string) {
			first, dir, _ := strings.Cut(arg, ":")
			off, _ := strconv.Atoi(first)
			s := openState(t, dir)
			eff := newEffects(dir)
			for p := range 10 {
				for jj := range 6 {
					j := (jj + off*3/2) % 6 // each process starts on other jobs
					k := idem.Key{Job: fmt.Sprintf("job%d", j), Period: fmt.Sprintf("2026-10-%02d", p+1)}
					err := s.Run(context.Background(), k, func(context.Context) error { eff.Add(nil, k.String()); return nil },
						idem.TwoPhase(func(_ context.Context, k idem.Key) (bool, error) { return eff.Counts(nil)[k.String()] > 0, nil }),
						idem.WaitForTurn())
					if err != nil {
						fmt.Println(err)
						os.Exit(3)
					}
				}
			}
		}))
	}
	for i, c := range children {
		if e := c.Wait(); e.Killed || e.Code != 0 {
			t.Fatalf("process %d: %+v", i, e)
		}
	}
	got := newEffects(dir).Counts(t)
	if len(got) != 60 {
		t.Fatalf("%d keys have effects, want 60", len(got))
	}
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s: %d effects", k, n)
		}
	}
	s := openState(t, dir)
	for j := range 6 {
		js, _ := s.Job(context.Background(), fmt.Sprintf("job%d", j))
		if js.Cursor != "2026-10-10" {
			t.Errorf("job%d watermark %q, want 2026-10-10", j, js.Cursor)
		}
	}
}

// TestStateFileFailedWriteIsFatal: when replacing the file fails (here the
// rename, which shares its error path with the fsync before it), the store
// refuses every later write, even once the cause is gone: after a failed
// fsync the kernel's view of the data is unknown, so it is never retried.
// The rename is made to fail by marking the state file immutable (chattr
// +i), which stops root too; the test skips where chattr cannot do that.
func TestStateFileFailedWriteIsFatal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openState(t, dir)
	ctx := context.Background()
	k1 := idem.Key{Job: "report", Period: "2026-10-27"}
	if err := s.Run(ctx, k1, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", s.Path()).CombinedOutput(); err != nil {
		t.Skipf("cannot make the state file immutable here (chattr: %v %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", s.Path()).Run() })
	k2 := idem.Key{Job: "report", Period: "2026-10-28"}
	ran := 0
	err := s.Run(ctx, k2, func(context.Context) error { ran++; return nil })
	if err == nil || !strings.Contains(err.Error(), "refusing further writes") {
		t.Fatalf("write over an immutable file: %v", err)
	}
	if out, err := exec.Command("chattr", "-i", s.Path()).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
	// The cause is gone; the store still refuses, and the file is as it was.
	k3 := idem.Key{Job: "report", Period: "2026-10-29"}
	err = s.Run(ctx, k3, func(context.Context) error { ran++; return nil }, idem.AtMostOnce())
	if err == nil || !strings.Contains(err.Error(), "refusing further writes") {
		t.Fatalf("a later write was tried again: %v", err)
	}
	if js, _ := openState(t, dir).Job(ctx, "report"); js.Cursor != "2026-10-27" {
		t.Fatalf("watermark %q, want 2026-10-27", js.Cursor)
	}
	t.Logf("fn ran %d times before the store refused", ran)
}

// TestStateFileStart: the state file's cursor is its watermark, so Start
// writes the watermark of a job that has none: every period at or before it
// then counts as done. It leaves a job with a pending period alone, and
// refuses while an attempt holds the job's lock.
func TestStateFileStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openState(t, t.TempDir())
	js, err := stateStore(t, s).Start(ctx, "new", "2026-10-26")
	if err != nil || js.Cursor != "2026-10-26" {
		t.Fatalf("Start: %+v, %v", js, err)
	}
	for _, p := range []string{"2026-10-26", "2026-10-20"} {
		ran := false
		var res idem.Result
		if err := s.Run(ctx, idem.Key{Job: "new", Period: p}, func(context.Context) error { ran = true; return nil }, idem.ReportTo(&res)); err != nil || ran || res.Outcome != idem.AlreadyDone {
			t.Fatalf("Run of %s, before the start: %v, ran %v, %v; want AlreadyDone", p, err, ran, res.Outcome)
		}
	}

	// A job whose pending period has no watermark before it (a Run's, or an
	// older idem's) keeps no start: its cursor stays "".
	pend := idem.Key{Job: "pending", Period: "2026-10-27"}
	if err := s.Run(ctx, pend, func(context.Context) error { return idem.Permanent(errors.New("no data")) }); !errors.Is(err, idem.ErrParked) {
		t.Fatal(err)
	}
	if js, err := stateStore(t, s).Start(ctx, "pending", "2026-10-20"); err != nil || js.Cursor != "" {
		t.Fatalf("Start of a job with a pending period: %+v, %v; want no cursor", js, err)
	}
	if rec := mustLookup(t, s, pend); rec.Status != idem.StatusParked {
		t.Fatalf("the pending period after Start: %+v", rec)
	}
	// Catch-up waits for that period until it is settled, then goes on.
	var ran []string
	job := func(context.Context, idem.Period) error { return nil }
	record := func(_ context.Context, p idem.Period) error { ran = append(ran, p.Name); return nil }
	if _, err := idem.CatchUp(ctx, s, "pending", daily, job, idem.WithClock(idemtest.NewClock(day(28)))); !errors.Is(err, idem.ErrOutOfOrder) {
		t.Fatalf("catch-up of a job with a pending period and no watermark: %v, want ErrOutOfOrder", err)
	}
	if err := s.Resolve(ctx, pend, idem.ResolveDone); err != nil {
		t.Fatal(err)
	}
	if res, err := idem.CatchUp(ctx, s, "pending", daily, record, idem.WithClock(idemtest.NewClock(day(28)))); err != nil || !slices.Equal(ran, []string{"2026-10-28"}) || res.Cursor != "2026-10-28" {
		t.Fatalf("catch-up after the resolve: %v, ran %v, cursor %q", err, ran, res.Cursor)
	}

	// While an attempt holds the job's lock, Start refuses and writes nothing.
	var startErr error
	if err := s.Run(ctx, idem.Key{Job: "held", Period: "2026-10-27"}, func(ctx context.Context) error {
		_, startErr = stateStore(t, s).Start(ctx, "held", "2026-10-26")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(startErr, idem.ErrInProgress) || !strings.Contains(startErr.Error(), `job "held"`) {
		t.Fatalf("Start while the job's lock is held: %v, want ErrInProgress naming the job", startErr)
	}
	if js, err := s.Job(ctx, "held"); err != nil || js.Cursor != "2026-10-27" {
		t.Fatalf("after the Run: %+v, %v; want the Run's watermark 2026-10-27", js, err)
	}
}

// TestStateFileAttemptsNeverRepeat: an attempt number is a fencing token,
// new for every attempt, also in AtLeastOnce, whose claim writes nothing to
// the state file: a process SIGKILLed after its claim, and a run stopped in
// this process after fn, leave the next attempt a higher number.
func TestStateFileAttemptsNeverRepeat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	attemptOf := func(ctx context.Context, s *idem.StateFile) (int64, error) {
		var attempt int64
		err := s.Run(ctx, key, func(ctx context.Context) error {
			info, _ := idem.InfoFrom(ctx)
			attempt = info.Attempt
			return nil
		})
		return attempt, err
	}
	exit := idemtest.Fork(t, dir, func(dir string) {
		s, err := idem.OpenStateFile(filepath.Join(dir, "state.json"))
		if err == nil {
			_, err = attemptOf(idemtest.KillAt(context.Background(), idemstore.AfterFn), s)
		}
		fmt.Println(err)
		os.Exit(3)
	})
	if !exit.Killed {
		t.Fatalf("the child was not killed after fn: %+v", exit)
	}
	s := openState(t, dir)
	a2, err := attemptOf(idemtest.CrashAt(context.Background(), idemstore.AfterFn), s)
	if !errors.Is(err, idemtest.ErrCrashed) {
		t.Fatalf("the stopped run: %v", err)
	}
	a3, err := attemptOf(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if a2 != 2 || a3 != 3 {
		t.Fatalf("attempts after a kill and a stop: %d, %d; want 2, 3 (each new)", a2, a3)
	}
	if rec := mustLookup(t, s, key); rec.Status != idem.StatusDone || rec.Attempt != 3 {
		t.Fatalf("record %+v; want done by attempt 3", rec)
	}
}
