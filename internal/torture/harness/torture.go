package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/effectlog"
	"github.com/idemgo/idem/internal/histcheck"
	"github.com/idemgo/idem/internal/proc"
)

// Config is one torture run, as the flags give it.
type Config struct {
	Store    string
	Mode     string
	Kills    int
	Keys     int
	Workers  int
	Seed     int64
	Duration time.Duration // the kill phase's limit
	Dir      string        // "" = a temp dir
	Keep     bool          // keep the temp dir
	Lease    time.Duration
	// Settle bounds the completion phase (after the kill phase); 0 = 2 min.
	Settle time.Duration
	// Stall: a worker that settles no key for this long is stuck (0 = 10 s):
	// it logs where (the key it is in Run of), dumps its goroutines and
	// exits 3. A worker still running Stall after the run's deadline is
	// sent SIGQUIT (its goroutines) and then killed. Either is reported in
	// Summary.Errors with the dump.
	Stall time.Duration
	// Exe is the binary workers run; "" = this one (os.Executable). Its main
	// or TestMain must call RunWorker when IsWorker (after registering the
	// backends it registers).
	Exe string
	// Exes, if set, are the binaries of the workers by slot: slot i runs
	// Exes[i % len(Exes)], and so does its restart after a kill. A rolling
	// upgrade's test mixes two releases' workers this way; "" = Exe.
	Exes []string
	// FirstCreates: the store is created by the workers of the slots that
	// run Exes[0] (the parent does not open it before them; the modes
	// with an effects log only), and the other slots start once the
	// effects log has a first line, which a worker writes only after it
	// has opened the store; the kill phase begins once one of the others
	// has opened it too (and upgraded it, in a rolling upgrade's test).
	FirstCreates bool
	Out          io.Writer // progress and the report; nil = os.Stdout
}

// Summary is the outcome of a run.
type Summary struct {
	Store, Mode string
	Kills       int
	Keys        int
	Effects     int // effect applications in total
	Duplicates  int // Σ max(0, count(key)-1)
	Lost        int // keys neither done nor unknown
	Unknown     int // keys of status unknown (statefile: and the periods blocked behind one)
	Blocked     int // statefile: periods after an unknown one (included in Unknown)
	NoEffect    int // keys done with no effect
	History     int // what is wrong with the keys' histories of attempts (stores that keep one: histcheck)
	Violations  int
	Errors      []string // harness failures (workers exiting non-zero, ...): not violations
	Dir         string
	Seed        int64
}

// Line is the report's last line.
func (s *Summary) Line() string {
	return fmt.Sprintf("torture: store=%s mode=%s kills=%d keys=%d effects=%d duplicates=%d lost=%d unknown=%d violations=%d",
		s.Store, s.Mode, s.Kills, s.Keys, s.Effects, s.Duplicates, s.Lost, s.Unknown, s.Violations)
}

// usageError is a bad flag or combination (exit 2).
type usageError struct{ error }

func (c *Config) validate() error {
	b := backend(c.Store)
	if b == nil {
		return usageError{unknownStore(c.Store)}
	}
	if err := checkCombo(b, c.Mode); err != nil {
		return usageError{err}
	}
	switch {
	case c.Kills < 0:
		return usageError{errors.New("-kills must be >= 0")}
	case c.Keys < 1:
		return usageError{errors.New("-keys must be >= 1")}
	case c.Workers < 1:
		return usageError{errors.New("-workers must be >= 1")}
	case c.Duration <= 0:
		return usageError{errors.New("-duration must be > 0")}
	case c.Lease <= 0:
		return usageError{errors.New("-lease must be > 0")}
	case c.FirstCreates && (c.Mode == "tx" || c.Mode == "outbox" || len(c.Exes) < 2):
		return usageError{errors.New("FirstCreates needs a mode with an effects log and two Exes")}
	}
	return nil
}

// slot is one worker position: the parent restarts a killed worker in its
// slot.
type slot struct {
	i, gen int
	fails  int  // non-zero exits (not kills)
	reaped bool // the exit of cmd has been looked at
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has been waited for
}

func (s *slot) exited() bool {
	if s.cmd == nil {
		return true // never (re)started
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *slot) name() string { return fmt.Sprintf("w%d.%d", s.i, s.gen) }

type runner struct {
	cfg      Config
	b        *Backend
	loc      string // the backend's locator (Prepare)
	out      io.Writer
	dir      string
	exe      string
	log      *os.File // workers.log, the workers' stdout (their log lines)
	deadline time.Time
	slots    []*slot
	errs     []string
	recv     *receiver // -mode outbox: the relays' downstream
}

func (r *runner) printf(format string, a ...any) {
	fmt.Fprintf(r.out, "torture: "+format+"\n", a...)
}

// Run runs a torture test: start the workers, kill them at random moments,
// let them finish, check the store against the effects. The report ends with
// s.Line(). err is a setup error (the run could not be done); violations and
// worker failures are in the summary.
func Run(cfg Config) (s *Summary, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 2 * time.Minute
	}
	if cfg.Stall <= 0 {
		cfg.Stall = defaultStall
	}
	r := &runner{cfg: cfg, b: backend(cfg.Store), out: cfg.Out, exe: cfg.Exe}
	if r.out == nil {
		r.out = os.Stdout
	}
	if r.exe == "" {
		if r.exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	temp := cfg.Dir == ""
	if temp {
		if r.dir, err = os.MkdirTemp("", "idem-torture-"); err != nil {
			return nil, err
		}
	} else {
		if r.dir, err = filepath.Abs(cfg.Dir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			return nil, err
		}
		if ents, err := os.ReadDir(r.dir); err != nil {
			return nil, err
		} else if len(ents) > 0 {
			return nil, usageError{fmt.Errorf("-dir %s is not empty", r.dir)}
		}
	}
	r.printf("seed=%d store=%s mode=%s kills=%d keys=%d workers=%d lease=%s duration=%s",
		cfg.Seed, cfg.Store, cfg.Mode, cfg.Kills, cfg.Keys, cfg.Workers, cfg.Lease, cfg.Duration)
	r.printf("dir=%s", r.dir)
	keep := cfg.Keep || !temp
	prepared := false
	defer func() {
		if keep {
			return
		}
		os.RemoveAll(r.dir)
		if prepared && r.b.Cleanup != nil {
			if err := r.b.Cleanup(context.Background(), r.loc); err != nil {
				r.printf("cleanup of the store: %v", err)
			}
		}
	}()
	if r.b.Prepare != nil {
		var desc string
		if r.loc, desc, err = r.b.Prepare(context.Background(), r.dir); err != nil {
			var ue usageError
			if errors.As(err, &ue) {
				return nil, err
			}
			return nil, fmt.Errorf("prepare the store: %w", err)
		}
		prepared = true
		r.printf("store: %s", desc)
	}

	if err := r.setup(); err != nil {
		if r.recv != nil {
			r.recv.close()
		}
		keep = true
		return nil, err
	}
	defer r.log.Close()
	if r.recv != nil {
		defer r.recv.close()
	}
	defer r.killAll() // on a panic or an early return

	start := time.Now()
	r.deadline = start.Add(cfg.Duration + cfg.Settle)
	if err := r.startAll(); err != nil {
		keep = true
		return nil, err
	}
	kills, why := r.killPhase(start)
	r.printf("kill phase: %d kills in %s (%s); waiting for the workers to finish", kills, time.Since(start).Round(time.Millisecond), why)
	r.settle()

	s, err = r.check()
	if err != nil {
		keep = true
		return nil, err
	}
	s.Kills, s.Seed, s.Dir = kills, cfg.Seed, r.dir
	s.Errors = append(r.errs, s.Errors...)
	for i, e := range s.Errors {
		if i == 20 {
			r.printf("... and %d more errors", len(s.Errors)-20)
			break
		}
		r.printf("error: %s", e)
	}
	if s.Violations > 0 || len(s.Errors) > 0 {
		keep = true
	}
	if keep {
		r.printf("seed=%d dir=%s (kept; the workers' log is %s)", cfg.Seed, r.dir, workersLog)
	} else {
		r.printf("seed=%d dir=%s (removed)", cfg.Seed, r.dir)
	}
	fmt.Fprintln(r.out, s.Line())
	return s, nil
}

// startAll starts every slot's first worker; with FirstCreates, those of
// Exes[0] first, the others once the effects log has a line, and it returns
// once one of the others has logged its start.
func (r *runner) startAll() error {
	for i := range r.cfg.Workers {
		r.slots = append(r.slots, &slot{i: i})
	}
	var late []string // the "start" lines of the later slots' workers
	for _, first := range []bool{true, false} {
		for _, sl := range r.slots {
			if r.cfg.FirstCreates && (r.exeOf(sl) == r.cfg.Exes[0]) != first {
				continue
			}
			if err := r.start(sl); err != nil {
				return err
			}
			late = append(late, fmt.Sprintf("%s pid=%d start\n", sl.name(), sl.cmd.Process.Pid))
		}
		if !r.cfg.FirstCreates {
			return nil
		}
		if first {
			late = nil
			if err := r.waitFile(effectsFile, "a first effect", func(b []byte) bool { return len(b) > 0 }); err != nil {
				return err
			}
		}
	}
	// The kill phase begins once one of them has opened the store (and
	// upgraded it): from then on every restart of a first slot's worker
	// opens the upgraded store.
	return r.waitFile(workersLog, "a later worker's start", func(b []byte) bool {
		return slices.ContainsFunc(late, func(l string) bool { return bytes.Contains(b, []byte(l)) })
	})
}

// waitFile waits (30 s at most) until the file named name in the run's
// directory satisfies ok.
func (r *runner) waitFile(name, what string, ok func([]byte) bool) error {
	path := filepath.Join(r.dir, name)
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && ok(b) {
			r.printf("%s in %s", what, path)
			return nil
		}
	}
	return fmt.Errorf("no %s in %s within 30s (see %s)", what, path, workersLog)
}

// exeOf is the binary of sl's workers.
func (r *runner) exeOf(sl *slot) string {
	if len(r.cfg.Exes) > 0 && r.cfg.Exes[sl.i%len(r.cfg.Exes)] != "" {
		return r.cfg.Exes[sl.i%len(r.cfg.Exes)]
	}
	return r.exe
}

// setup prepares the directory: the store (and the tx mode's table), the
// effects log, the workers' log.
func (r *runner) setup() error {
	if r.cfg.FirstCreates {
		return r.setupFiles()
	}
	ctx := context.Background()
	h, err := r.b.Open(ctx, r.dir, r.loc)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if r.cfg.Mode == "tx" {
		if h.Tx == nil {
			h.Close()
			return usageError{fmt.Errorf("-store %s has no RunTx", r.cfg.Store)}
		}
		if err := h.Tx.Setup(ctx); err != nil {
			h.Close()
			return fmt.Errorf("create effects table: %w", err)
		}
	}
	if r.cfg.Mode == "outbox" {
		if h.Outbox == nil {
			h.Close()
			return usageError{fmt.Errorf("-store %s has no outbox", r.cfg.Store)}
		}
		if err := h.Outbox.Setup(ctx); err != nil {
			h.Close()
			return fmt.Errorf("create the business table: %w", err)
		}
		if r.recv, err = startReceiver(r.dir, r.cfg.Seed); err != nil {
			h.Close()
			return err
		}
		r.printf("receiver: %s", r.recv.url)
	}
	if err := h.Close(); err != nil {
		return err
	}
	return r.setupFiles()
}

// setupFiles creates the effects log (modes other than tx and outbox) and
// the workers' log.
func (r *runner) setupFiles() (err error) {
	if r.cfg.Mode != "tx" && r.cfg.Mode != "outbox" {
		if err := os.WriteFile(filepath.Join(r.dir, effectsFile), nil, 0o644); err != nil {
			return err
		}
	}
	r.log, err = os.OpenFile(filepath.Join(r.dir, workersLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	return err
}

// start starts the slot's next worker.
func (r *runner) start(sl *slot) error {
	wc := workerConfig{Store: r.cfg.Store, Loc: r.loc, Mode: r.cfg.Mode, Dir: r.dir, Keys: r.cfg.Keys, Seed: r.cfg.Seed,
		Lease: r.cfg.Lease, Stall: r.cfg.Stall, Slot: sl.i, Gen: sl.gen, Deadline: r.deadline}
	if r.recv != nil {
		wc.URL = r.recv.url
	}
	b, err := json.Marshal(wc)
	if err != nil {
		return err
	}
	// Each worker's stderr is a file of its own: a panic or a goroutine dump
	// (a stuck worker's) is kept whole for the report.
	stderr, err := os.Create(r.stderrPath(sl))
	if err != nil {
		sl.cmd = nil
		return fmt.Errorf("start worker %s: %w", sl.name(), err)
	}
	defer stderr.Close() // the worker has its own descriptor
	cmd := exec.Command(r.exeOf(sl))
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	cmd.Stdout, cmd.Stderr = r.log, stderr
	// Workers die with the torture process: a stopped run leaves none behind
	// (on Linux only; elsewhere a killed torture process leaves them running).
	proc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		sl.cmd = nil
		return fmt.Errorf("start worker %s: %w", sl.name(), err)
	}
	sl.cmd, sl.done, sl.reaped = cmd, make(chan struct{}), false
	done := sl.done
	go func() {
		cmd.Wait()
		close(done)
	}()
	return nil
}

// killPhase kills random live workers at random moments and restarts them,
// until cfg.Kills kills, cfg.Duration, or every worker has finished. why
// says which.
func (r *runner) killPhase(start time.Time) (kills int, why string) {
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0x6b111))
	end := start.Add(r.cfg.Duration)
	for {
		switch {
		case kills >= r.cfg.Kills:
			return kills, "-kills reached"
		case !time.Now().Before(end):
			return kills, "-duration elapsed"
		}
		var live []*slot
		for _, sl := range r.slots {
			if sl.exited() {
				r.reap(sl, true)
			}
			if !sl.exited() {
				live = append(live, sl)
			}
		}
		if len(live) == 0 {
			return kills, "no live worker left: every worker finished (or failed) first; more -keys make room for more kills"
		}
		sl := live[rng.IntN(len(live))]
		d := time.Duration(rng.IntN(50_001)) * time.Microsecond
		select {
		case <-sl.done:
			continue // finished (or failed) on its own: reaped on the next round
		case <-time.After(min(d, time.Until(end))):
		}
		if time.Now().After(end) {
			continue
		}
		_ = proc.Kill(sl.cmd.Process)
		if !r.wait(sl, reapLimit) {
			r.errs = append(r.errs, fmt.Sprintf("worker %s (pid %d) still there %s after SIGKILL", sl.name(), sl.cmd.Process.Pid, reapLimit))
			return kills, "a killed worker did not die"
		}
		if killed(sl.cmd) {
			kills++
			sl.gen++
			if err := r.start(sl); err != nil {
				r.errs = append(r.errs, err.Error())
			}
			continue
		}
		r.reap(sl, true) // it exited just before the signal
	}
}

func killed(cmd *exec.Cmd) bool {
	return proc.Killed(cmd.ProcessState)
}

// reap looks at an exited worker that was not killed by the parent: exit 0
// means it finished; anything else is an error, and the worker is restarted
// if restart is set (during the kill phase) so that the run can go on.
func (r *runner) reap(sl *slot, restart bool) {
	if sl.cmd == nil || !sl.exited() || sl.reaped {
		return
	}
	sl.reaped = true
	if sl.cmd.ProcessState.ExitCode() == 0 {
		return
	}
	r.errs = append(r.errs, fmt.Sprintf("worker %s (pid %d) exited: %s%s%s", sl.name(), sl.cmd.Process.Pid,
		sl.cmd.ProcessState, r.tail(sl), r.stderr(sl)))
	sl.fails++
	if !restart || sl.fails > 3 {
		return
	}
	sl.gen++
	if err := r.start(sl); err != nil {
		r.errs = append(r.errs, err.Error())
	}
}

// tail returns the last lines a worker logged and, when it logged that it
// is stuck in a Run, what the workers logged about that key's job.
func (r *runner) tail(sl *slot) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, workersLog))
	prefix := fmt.Sprintf("%s pid=%d ", sl.name(), sl.cmd.Process.Pid)
	var lines []string
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	lines = lines[max(0, len(lines)-3):]
	if len(lines) == 0 {
		return ""
	}
	s := "; last log: " + strings.Join(lines, " | ")
	// "w0.3 pid=9 stuck: ...; in Run of job4/2026-01-02 for 10s (...)"
	last := lines[len(lines)-1]
	if _, after, ok := strings.Cut(last, " in Run of "); ok && strings.Contains(last, " stuck: ") {
		job, _, _ := strings.Cut(after, "/")
		if hist := jobHistory(b, job, 12); len(hist) > 0 {
			s += "\n\tthe workers' log about " + job + ":\n\t\t" + strings.Join(hist, "\n\t\t")
		}
	}
	return s
}

// jobHistory returns the last n lines of the workers' log about job's keys.
func jobHistory(log []byte, job string, n int) []string {
	var hist []string
	for l := range strings.Lines(string(log)) {
		// "w1.3 pid=123 run job0/2026-01-01: a2 ran"
		f := strings.Fields(l)
		if len(f) >= 4 && strings.HasPrefix(f[3], job+"/") {
			hist = append(hist, strings.TrimSpace(l))
		}
	}
	return hist[max(0, len(hist)-n):]
}

// stderrPath is the file that gets the worker's stderr.
func (r *runner) stderrPath(sl *slot) string {
	return filepath.Join(r.dir, sl.name()+".stderr")
}

// stderr returns what the worker wrote to its stderr (a panic, the goroutine
// dump of a stuck worker), at most maxStderr bytes of it, for a report.
func (r *runner) stderr(sl *slot) string {
	const maxStderr = 32 << 10
	b, err := os.ReadFile(r.stderrPath(sl))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	s := string(b)
	if len(s) > maxStderr {
		s = s[:maxStderr] + fmt.Sprintf("\n... (%d bytes more in %s)", len(b)-maxStderr, r.stderrPath(sl))
	}
	return fmt.Sprintf("\n\t%s's stderr:\n%s", sl.name(), s)
}

// wait waits up to d for the slot's worker to exit; false if it has not.
func (r *runner) wait(sl *slot, d time.Duration) bool {
	timer := time.NewTimer(max(d, 0))
	defer timer.Stop()
	select {
	case <-sl.done:
		return true
	case <-timer.C:
		return sl.exited()
	}
}

// reapLimit: how long a worker sent SIGQUIT gets to print its goroutines
// and exit, and one sent SIGKILL to be gone.
const reapLimit = 10 * time.Second

// settle waits for every worker to finish on its own (restarting none),
// until cfg.Stall after the deadline, each worker with a timer of its own. A
// worker stops by itself at the deadline (exit 3), and its watchdog stops it
// long before when it settles nothing for cfg.Stall; one still running then
// is stuck: see stuck.
func (r *runner) settle() {
	for _, sl := range r.slots {
		if sl.cmd == nil {
			continue
		}
		if !r.wait(sl, time.Until(r.deadline)+r.cfg.Stall) {
			r.stuck(sl, fmt.Sprintf("still running %s after the run's deadline", r.cfg.Stall))
			continue
		}
		if killed(sl.cmd) {
			r.errs = append(r.errs, fmt.Sprintf("worker %s (pid %d) was killed by someone else", sl.name(), sl.cmd.Process.Pid))
			continue
		}
		r.reap(sl, false)
	}
}

// stuck ends a worker that does not end by itself: SIGQUIT first, so that
// the Go runtime prints its goroutines to its stderr file and exits, then
// SIGKILL if it is still there. The error names the worker, what it last
// logged (the key it was in) and its goroutines.
func (r *runner) stuck(sl *slot, why string) {
	pid := sl.cmd.Process.Pid
	_ = sl.cmd.Process.Signal(syscall.SIGQUIT)
	how := "sent SIGQUIT"
	if !r.wait(sl, reapLimit) {
		_ = sl.cmd.Process.Signal(syscall.SIGKILL)
		how = fmt.Sprintf("sent SIGQUIT, then SIGKILL %s later", reapLimit)
		if !r.wait(sl, reapLimit) {
			how += fmt.Sprintf(", and it was still there %s after that", reapLimit)
		}
	}
	sl.reaped = true
	r.errs = append(r.errs, fmt.Sprintf("worker %s (pid %d) stuck: %s; %s%s%s", sl.name(), pid, why, how, r.tail(sl), r.stderr(sl)))
}

// killAll SIGKILLs the workers still running (after a setup error or a
// panic), each waited for reapLimit at most.
func (r *runner) killAll() {
	for _, sl := range r.slots {
		if sl.cmd != nil && !sl.exited() {
			_ = sl.cmd.Process.Signal(syscall.SIGKILL)
			r.wait(sl, reapLimit)
		}
	}
}

// violation is one broken promise, for the report.
type violation struct {
	key    idem.Key
	what   string
	detail string
}

// check compares the store's records with the effects.
func (r *runner) check() (*Summary, error) {
	ctx := context.Background()
	b := r.b
	h, err := b.Open(ctx, r.dir, r.loc)
	if err != nil {
		return nil, fmt.Errorf("check: open store: %w", err)
	}
	defer h.Close()
	s := &Summary{Store: r.cfg.Store, Mode: r.cfg.Mode, Keys: r.cfg.Keys}
	if r.cfg.Mode == "outbox" {
		vs, err := r.checkOutbox(ctx, h, s)
		if err != nil {
			return nil, err
		}
		r.report(vs)
		return s, nil
	}

	var counts map[string]int
	if r.cfg.Mode == "tx" {
		if counts, err = h.Tx.Counts(ctx); err != nil {
			return nil, fmt.Errorf("check: count effects: %w", err)
		}
	} else {
		// A record a kill cut short is none (effectlog): its worker's
		// fn never returned, and the key's next attempt checks again.
		// Workers of an older release (the rolling upgrade) write plain
		// lines.
		if counts, err = effectlog.CountsMixed(filepath.Join(r.dir, effectsFile)); err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
	}
	known := map[string]bool{}
	for _, ks := range makeKeys(r.cfg.Keys) {
		for _, k := range ks {
			known[k.String()] = true
		}
	}
	for k, n := range counts {
		s.Effects += n
		if !known[k] {
			s.Errors = append(s.Errors, fmt.Sprintf("effect for an unknown key %q (%d times)", k, n))
		}
	}

	dupsAreViolations := r.cfg.Mode != "atleastonce"
	hs, hasHistory := historian(h.Store)
	var vs []violation
	for _, ks := range makeKeys(r.cfg.Keys) {
		blockedBy := "" // watermark store: an earlier period of the job is unknown
		for _, k := range ks {
			n := counts[k.String()]
			if n > 1 {
				s.Duplicates += n - 1
				if dupsAreViolations {
					vs = append(vs, violation{k, "duplicate", fmt.Sprintf("effects=%d", n)})
				}
			}
			rec, ok, err := h.Store.Lookup(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("check: lookup %s: %w", k, err)
			}
			desc := fmt.Sprintf("effects=%d status=%s attempt=%d failures=%d", n, rec.Status, rec.Attempt, rec.Failures)
			if !ok {
				desc = fmt.Sprintf("effects=%d no record", n)
			}
			if len(vs) > 0 && vs[len(vs)-1].key == k {
				vs[len(vs)-1].detail = desc
			}
			if hasHistory {
				// The history of attempts, kept through the kills (and,
				// in a rolling upgrade, by both releases).
				hist, err := hs.History(ctx, k)
				if err != nil {
					return nil, fmt.Errorf("check: history of %s: %w", k, err)
				}
				for _, p := range histcheck.Check(rec, ok, hist) {
					s.History++
					vs = append(vs, violation{k, "history", p + "; " + desc})
				}
			}
			switch {
			case ok && rec.Status == idem.StatusDone:
				if n == 0 {
					s.NoEffect++
					vs = append(vs, violation{k, "done-without-effect", desc})
				}
			case ok && rec.Status == idem.StatusUnknown:
				s.Unknown++
				if b.Watermark && blockedBy == "" {
					blockedBy = k.Period
				}
			case !ok && blockedBy != "":
				// Its job's watermark waits for an unknown period's Resolve:
				// the same outcome as that period's.
				s.Unknown++
				s.Blocked++
			default:
				s.Lost++
				vs = append(vs, violation{k, "lost", desc})
			}
		}
	}
	s.Violations = s.Lost + s.NoEffect + s.History
	if dupsAreViolations {
		s.Violations += s.Duplicates
	}
	if s.Blocked > 0 {
		r.printf("blocked=%d: periods after an unknown period of their job (statefile watermark); counted as unknown", s.Blocked)
	}
	r.report(vs)
	return s, nil
}

// historian returns the store behind s (idemstore.Of) if it keeps a
// history of attempts.
func historian(s idem.Store) (idemstore.Historian, bool) {
	st, err := idemstore.Of(s)
	if err != nil {
		return nil, false
	}
	hs, ok := st.(idemstore.Historian)
	return hs, ok
}

// report prints at most 20 violations, each with the workers' log lines about
// its key.
func (r *runner) report(vs []violation) {
	if len(vs) == 0 {
		return
	}
	b, _ := os.ReadFile(filepath.Join(r.dir, workersLog))
	const most = 20
	for i, v := range vs {
		if i == most {
			r.printf("... and %d more violations", len(vs)-most)
			break
		}
		var hist []string
		needle := v.key.String() + ":"
		for l := range strings.Lines(string(b)) {
			// "w1.3 pid=123 effect> job0/2026-01-01: a2" or "... run <key>: a2 ran"
			f := strings.Fields(l)
			if len(f) < 4 || f[3] != needle {
				continue
			}
			hist = append(hist, shorten(f[0]+" "+f[2]+" "+strings.Join(f[4:], " "), 80))
		}
		if len(hist) > 8 {
			hist = append(hist[:2], append([]string{"..."}, hist[len(hist)-5:]...)...)
		}
		if len(hist) == 0 {
			hist = []string{"none logged"}
		}
		r.printf("VIOLATION %s %s: %s; history: %s", v.key, v.what, v.detail, strings.Join(hist, " | "))
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
