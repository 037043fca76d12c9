package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/effectlog"
)

// workerEnv, when set, makes the binary a worker: its value is the worker's
// configuration as JSON. main and the tests' TestMain check it first
// ([IsWorker]).
const workerEnv = "IDEM_TORTURE_WORKER"

// Exit codes of a worker.
const (
	workerOK       = 0
	workerSetup    = 2 // could not start
	workerDeadline = 3 // keys still unsettled at the deadline, or stuck (no key settled for Config.Stall)
)

// workerConfig is what the parent hands a worker.
type workerConfig struct {
	Store    string        `json:"store"`
	Loc      string        `json:"loc,omitempty"` // the backend's locator (Backend.Prepare)
	Mode     string        `json:"mode"`
	Dir      string        `json:"dir"`
	Keys     int           `json:"keys"`
	Seed     int64         `json:"seed"`
	Lease    time.Duration `json:"lease"`
	Stall    time.Duration `json:"stall"` // Config.Stall
	Slot     int           `json:"slot"`
	Gen      int           `json:"gen"` // how many times this slot was started before
	Deadline time.Time     `json:"deadline"`
	URL      string        `json:"url,omitempty"` // -mode outbox: the receiver the relays post to
}

const (
	periodsPerJob = 5
	effectsFile   = "effects.log"
	workersLog    = "workers.log"
)

// makeKeys lays out k keys as jobs of up to periodsPerJob daily periods
// ("2026-01-01", ...), in order: ceil(k/5) jobs "job<j>". Periods of one job
// sort as strings, as a StateFile's watermark needs.
func makeKeys(k int) [][]idem.Key {
	var jobs [][]idem.Key
	for j := 0; k > 0; j++ {
		n := min(k, periodsPerJob)
		var ks []idem.Key
		for p := range n {
			ks = append(ks, idem.Key{Job: fmt.Sprintf("job%d", j), Period: fmt.Sprintf("2026-01-%02d", p+1)})
		}
		jobs = append(jobs, ks)
		k -= n
	}
	return jobs
}

// IsWorker reports whether this process is a worker that a torture run
// started: then main (or TestMain) must return [RunWorker]'s exit code and
// do nothing else.
func IsWorker() bool { return os.Getenv(workerEnv) != "" }

// RunWorker runs the worker configured by $IDEM_TORTURE_WORKER and returns
// its exit code. The worker's backend must be registered.
func RunWorker() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "torture worker: bad $%s: %v\n", workerEnv, err)
		return workerSetup
	}
	return runWorker(cfg)
}

// wlog writes one line to the worker's stdout (the shared workers.log, opened
// O_APPEND by the parent: one write per line keeps the workers' lines apart,
// but for a line a SIGKILL cuts short, which the next line then follows on
// the same line; it is read by people, and searched for a start). The worker's
// stderr is a file of its own (<name>.stderr): panics and goroutine dumps go
// there whole, not interleaved with the other workers' lines.
type wlog string

func (w wlog) printf(format string, a ...any) {
	fmt.Fprintf(os.Stdout, string(w)+" "+format+"\n", a...)
}

func runWorker(cfg workerConfig) int {
	lg := wlog(fmt.Sprintf("w%d.%d pid=%d", cfg.Slot, cfg.Gen, os.Getpid()))
	b := backend(cfg.Store)
	if b == nil {
		lg.printf("setup: unknown store %q", cfg.Store)
		return workerSetup
	}
	if err := checkCombo(b, cfg.Mode); err != nil {
		lg.printf("setup: %v", err)
		return workerSetup
	}
	ctx := context.Background()
	h, err := b.Open(ctx, cfg.Dir, cfg.Loc)
	if err != nil {
		lg.printf("setup: open store: %v", err)
		return workerSetup
	}
	defer h.Close()
	w := &worker{cfg: cfg, lg: lg, h: h, lastErr: map[idem.Key]string{},
		rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Slot)<<32|uint64(cfg.Gen))),
		sleep: rand.New(rand.NewPCG(uint64(cfg.Seed)^0x5eed, uint64(cfg.Slot)<<32|uint64(cfg.Gen))),
	}
	if cfg.Mode != "tx" && cfg.Mode != "outbox" {
		w.effects, err = os.OpenFile(filepath.Join(cfg.Dir, effectsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			lg.printf("setup: %v", err)
			return workerSetup
		}
		defer w.effects.Close()
	}
	w.txOpts = []idem.Option{
		idem.WaitForTurn(),
		idem.WithLease(cfg.Lease),
		idem.WithBackoff(idem.MaxAttempts(1000, idem.Constant(time.Millisecond))),
	}
	w.opts = []idem.Option{
		idem.WaitForTurn(),
		idem.WithLease(cfg.Lease),
		idem.WithBackoff(idem.MaxAttempts(1000, idem.Constant(time.Millisecond))),
	}
	switch cfg.Mode {
	case "atleastonce":
		w.opts = append(w.opts, idem.AtLeastOnce())
	case "atmostonce":
		w.opts = append(w.opts, idem.AtMostOnce())
	case "twophase":
		w.opts = append(w.opts, idem.TwoPhase(w.downstreamHas))
	}
	lg.printf("start")
	// Run waits out busy keys (WaitForTurn) until its context ends: the
	// deadline bounds every call, and the watchdog gives up much sooner on a
	// worker that settles nothing.
	ctx, cancel := context.WithDeadline(ctx, cfg.Deadline)
	defer cancel()
	if w.cfg.Stall <= 0 {
		w.cfg.Stall = defaultStall
	}
	w.progress.Store(time.Now().UnixNano())
	go w.watchdog()
	if cfg.Mode == "outbox" {
		return w.loopOutbox(ctx)
	}
	return w.loop(ctx, b.Watermark)
}

type worker struct {
	cfg     workerConfig
	lg      wlog
	h       *Handle
	rng     *rand.Rand // key order: seeded
	sleep   *rand.Rand // the effect's pauses (only the worker's goroutine uses it)
	effects *os.File
	opts    []idem.Option // the options of every Run
	txOpts  []idem.Option // the options of every RunTx (tx mode)
	lastErr map[idem.Key]string

	progress atomic.Int64          // when a key was last settled (UnixNano)
	current  atomic.Pointer[inRun] // the Run under way; nil between Runs
}

// inRun is the key a worker is running, and since when.
type inRun struct {
	key   idem.Key
	since time.Time
}

// defaultStall is Config.Stall's default: a worker that settles no key for
// this long is stuck. Its watchdog logs where, dumps its goroutines to
// stderr and exits 3 (whether the worker is between Runs or inside one that
// does not return). It is far above what a Run takes on a loaded machine (a
// lease is 100 ms by default, and a killed holder's lease expires within
// one) and far below a run's deadline.
const defaultStall = 10 * time.Second

// pastDeadline: how long after the run's deadline a worker still inside a
// Run (which should have returned with its context) gives up the same way.
const pastDeadline = 2 * time.Second

// watchdog ends a stuck worker with a diagnosis: a "stuck:" line in the
// workers' log naming the key it is in Run of (and that key's record), and
// its goroutines on its stderr. The parent reports both.
func (w *worker) watchdog() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		idle := time.Since(time.Unix(0, w.progress.Load()))
		late := time.Since(w.cfg.Deadline)
		switch {
		case idle > w.cfg.Stall:
			w.stuck(fmt.Sprintf("no key settled for %s", idle.Round(time.Millisecond)))
		case late > pastDeadline:
			w.stuck(fmt.Sprintf("still running %s after the deadline", late.Round(time.Millisecond)))
		}
	}
}

// stuck logs why and where the worker is stuck, dumps its goroutines to
// stderr and exits workerDeadline.
func (w *worker) stuck(why string) {
	where := "between Runs"
	if cur := w.current.Load(); cur != nil {
		where = fmt.Sprintf("in Run of %s for %s (%s)", cur.key, time.Since(cur.since).Round(time.Millisecond), w.describe(cur.key))
	}
	w.lg.printf("stuck: %s; %s; goroutines on stderr", why, where)
	fmt.Fprintf(os.Stderr, "%s stuck: %s; %s\n\n", w.lg, why, where)
	_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
	os.Exit(workerDeadline)
}

// describe returns key's record as the store has it, for a stuck worker's
// report; the lookup may block on what blocks the worker, so it gets a few
// seconds of its own.
func (w *worker) describe(key idem.Key) string {
	type lookup struct {
		rec idem.Record
		ok  bool
		err error
	}
	got := make(chan lookup, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		rec, ok, err := w.h.Store.Lookup(ctx, key)
		got <- lookup{rec, ok, err}
	}()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case l := <-got:
		switch {
		case l.err != nil:
			return "lookup: " + l.err.Error()
		case !l.ok:
			return "no record"
		}
		desc := fmt.Sprintf("record: status=%s attempt=%d owner=%s", l.rec.Status, l.rec.Attempt, l.rec.Owner)
		if strings.Contains(l.rec.Owner, fmt.Sprintf(":%d:", os.Getpid())) {
			desc += " (this process)"
		}
		return desc
	case <-timer.C:
		return "lookup of its record did not return in 5s"
	}
}

// loop runs every key until each is settled from this worker's point of view:
// Run returned nil or ErrUnknownOutcome. With a watermark store a job's
// periods are run in order; an unknown period ends its job (later periods
// cannot run before it is resolved). Any other error means: move on, come
// back later.
func (w *worker) loop(ctx context.Context, watermark bool) int {
	jobs := makeKeys(w.cfg.Keys)
	// A unit is a sequence of keys to be settled in order: a whole job for a
	// watermark store, a single key otherwise.
	var units [][]idem.Key
	if watermark {
		units = jobs
	} else {
		for _, ks := range jobs {
			for _, k := range ks {
				units = append(units, []idem.Key{k})
			}
		}
	}
	w.rng.Shuffle(len(units), func(i, j int) { units[i], units[j] = units[j], units[i] })
	for len(units) > 0 {
		if time.Now().After(w.cfg.Deadline) {
			w.lg.printf("deadline: %d units unsettled, first %s", len(units), units[0][0])
			return workerDeadline
		}
		// Run waits out leases and backoffs itself (WaitForTurn): a worker
		// that settles nothing for cfg.Stall is stopped by its watchdog.
		// Visit the units in a random order; settle at most one key of each
		// per visit, so that the workers' paths interleave.
		progress := false
		var left [][]idem.Key
		for _, u := range units {
			settled, unknown := w.runKey(ctx, u[0])
			if settled || unknown {
				w.progress.Store(time.Now().UnixNano())
			}
			switch {
			case unknown:
				progress = true // the unit ends here (watermark: later periods wait for a Resolve)
			case settled:
				progress = true
				if len(u) > 1 {
					left = append(left, u[1:])
				}
			default:
				left = append(left, u)
			}
		}
		units = left
		w.rng.Shuffle(len(units), func(i, j int) { units[i], units[j] = units[j], units[i] })
		if !progress {
			time.Sleep(time.Duration(1+w.rng.IntN(5)) * time.Millisecond)
		}
	}
	w.lg.printf("finished")
	return workerOK
}

// runKey runs one key once. settled: Run returned nil; unknown: it returned
// ErrUnknownOutcome.
func (w *worker) runKey(ctx context.Context, key idem.Key) (settled, unknown bool) {
	var res idem.Result
	var err error
	w.current.Store(&inRun{key: key, since: time.Now()})
	if w.cfg.Mode == "tx" {
		err = w.h.Tx.RunTx(ctx, key, w.txEffect, append(w.txOpts[:len(w.txOpts):len(w.txOpts)], idem.ReportTo(&res))...)
	} else {
		err = idem.RunOn(ctx, w.h.Store, key, w.effect, append(w.opts[:len(w.opts):len(w.opts)], idem.ReportTo(&res))...)
	}
	w.current.Store(nil)
	switch {
	case err == nil && res.Outcome != idem.AlreadyDone:
		w.lg.printf("run %s: a%d %s", key, res.Attempt, res.Outcome)
	case err != nil && err.Error() != w.lastErr[key]: // an error that repeats is logged once
		w.lg.printf("run %s: a%d %s: %v", key, res.Attempt, res.Outcome, err)
		w.lastErr[key] = err.Error()
	}
	switch {
	case err == nil:
		return true, false
	case errors.Is(err, idem.ErrUnknownOutcome):
		return false, true
	}
	return false, false
}

// pause sleeps 0–3 ms, to widen the windows around the effect.
func (w *worker) pause() {
	time.Sleep(time.Duration(w.sleep.IntN(3001)) * time.Microsecond)
}

// effect is fn for the log modes: append "<job>/<period>" to the effects log
// (the downstream, written independently of idem) and fsync it.
func (w *worker) effect(ctx context.Context) error {
	info, _ := idem.InfoFrom(ctx)
	w.pause()
	if err := ctx.Err(); err != nil { // cancelled (lease lost): do not reach the downstream
		return context.Cause(ctx)
	}
	w.lg.printf("effect> %s: a%d", info.Key, info.Attempt)
	// The last check before the irreversible write, as the docs advise: a
	// worker that stalled past its lease must not act.
	if err := idem.CheckLease(ctx); err != nil {
		return idem.NothingHappened(err) // refused before the effect
	}
	if err := effectlog.Append(w.effects, info.Key.String()); err != nil {
		return err
	}
	if err := w.effects.Sync(); err != nil {
		return err
	}
	w.pause()
	return nil
}

// txEffect is fn for -mode tx: the non-idempotent upsert (bump), in the
// store's transaction.
func (w *worker) txEffect(ctx context.Context, bump func(context.Context) error) error {
	w.pause()
	if err := bump(ctx); err != nil {
		return err
	}
	w.pause()
	return nil
}

// downstreamHas is TwoPhase's check: is key's line in the effects log?
func (w *worker) downstreamHas(ctx context.Context, key idem.Key) (bool, error) {
	counts, err := effectlog.CountsMixed(filepath.Join(w.cfg.Dir, effectsFile)) // an older release's workers write plain lines
	return counts[key.String()] > 0, err
}
