package idemtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// ModelOptions sizes a run of [TestModel]. The environment overrides them,
// so that a long run or a reproduction needs no change of code:
// IDEM_MODEL_OPS, IDEM_MODEL_SEED and IDEM_MODEL_LEN.
type ModelOptions struct {
	// Ops is how many operations to run in all (default 2000).
	Ops int
	// Seed is the seed of the first sequence; sequence i uses Seed+i.
	// Zero: a seed from the time (printed, to reproduce a failure).
	Seed uint64
	// Len is how many operations each sequence has, each on a new store
	// (default 500).
	Len int
	// StepTimeout bounds one operation (default one minute): a stuck
	// step prints every goroutine's stack and fails.
	StepTimeout time.Duration
	// Parallel runs the sequences at once, each a parallel subtest
	// (t.Parallel) of a subtest "parallel". The harness's Open must then be
	// safe to call from several goroutines, and the stores it opens must
	// not share a bounded resource that one sequence may hold while it
	// waits for more (a small connection pool, say). Every sequence runs to
	// its end or first mismatch; the first failing one in seed order is
	// reported and shrunk, as without Parallel.
	Parallel bool
}

// TxHarness lets [TestModel] exercise idem.RunTx on a store whose
// records share a database with business data: the business write of each
// attempt must commit with the done mark, or not at all (exactly once).
type TxHarness struct {
	// Setup prepares a new store for Run and Rows (creates the business
	// table). It may be nil.
	Setup func(ctx context.Context, s idem.Store) error
	// Run calls idem.RunTx (or the store's RunTx) on s for key with
	// opts, with a fn that first makes one business write for key in the
	// transaction, then returns what fn(ctx) returns. ctx must be passed on
	// as it is given to the transaction's fn (it carries idem.Info).
	Run func(ctx context.Context, s idem.Store, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error
	// Rows returns the committed business writes, counted by key.
	Rows func(ctx context.Context, s idem.Store) (map[idem.Key]int, error)
	// CatchUp, if set, calls idem.CatchUpTx on s with the same business
	// write for each period's key (job, p.Name), then fn(ctx, p); TestModel
	// then also catches up a RunTx job.
	CatchUp func(ctx context.Context, s idem.Store, job string, sched idem.Schedule, fn func(context.Context, idem.Period) error, opts ...idem.Option) (idem.CatchUpResult, error)
}

// SQLTx is the [TxHarness] of a store whose transactions are *sql.Tx and
// that gives its database with a method DB() *sql.DB, as [idem.Ledger]
// does: the business writes go to a table idemtest_model_effects.
func SQLTx() *TxHarness {
	db := func(s idem.Store) (*sql.DB, error) {
		d, ok := s.(interface{ DB() *sql.DB })
		if !ok {
			return nil, fmt.Errorf("idemtest: SQLTx: %T has no method DB() *sql.DB", s)
		}
		return d.DB(), nil
	}
	write := func(ctx context.Context, tx *sql.Tx, key idem.Key) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO idemtest_model_effects(job, period, n) VALUES (?, ?, 1)
			ON CONFLICT (job, period) DO UPDATE SET n = n + 1`, key.Job, key.Period)
		return err
	}
	return &TxHarness{
		Setup: func(ctx context.Context, s idem.Store) error {
			d, err := db(s)
			if err != nil {
				return err
			}
			_, err = d.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS idemtest_model_effects (
				job TEXT NOT NULL, period TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (job, period))`)
			return err
		},
		Run: func(ctx context.Context, s idem.Store, key idem.Key, fn func(context.Context) error, opts ...idem.Option) error {
			ts, ok := s.(idemstore.TxStore[*sql.Tx])
			if !ok {
				return fmt.Errorf("idemtest: SQLTx: %T is not an idemstore.TxStore[*sql.Tx]", s)
			}
			return idem.RunTx(ctx, idem.TxStoreOf(ts), key, func(ctx context.Context, tx *sql.Tx) error {
				if err := write(ctx, tx, key); err != nil {
					return err
				}
				return fn(ctx)
			}, opts...)
		},
		CatchUp: func(ctx context.Context, s idem.Store, job string, sched idem.Schedule, fn func(context.Context, idem.Period) error, opts ...idem.Option) (idem.CatchUpResult, error) {
			cs, ok := s.(idemstore.CatchUpTxStore[*sql.Tx])
			if !ok {
				return idem.CatchUpResult{}, fmt.Errorf("idemtest: SQLTx: %T is not an idemstore.CatchUpTxStore[*sql.Tx]", s)
			}
			return idem.CatchUpTx(ctx, idem.TxStoreOf[*sql.Tx](cs), job, sched, func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
				if err := write(ctx, tx, idem.Key{Job: job, Period: p.Name}); err != nil {
					return err
				}
				return fn(ctx, p)
			}, opts...)
		},
		Rows: func(ctx context.Context, s idem.Store) (map[idem.Key]int, error) {
			d, err := db(s)
			if err != nil {
				return nil, err
			}
			rows, err := d.QueryContext(ctx, `SELECT job, period, n FROM idemtest_model_effects`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			out := map[idem.Key]int{}
			for rows.Next() {
				var k idem.Key
				var n int
				if err := rows.Scan(&k.Job, &k.Period, &n); err != nil {
					return nil, err
				}
				out[k] = n
			}
			return out, rows.Err()
		},
	}
}

// TestModel is the model-based test of the conformance kit: it runs long
// random sequences of operations against the store h opens, and after
// every operation compares the store's records (Lookup, List, Job), the
// effects fn applied and the business rows RunTx committed with a small
// reference model of what they must be. Each sequence runs on a new store.
//
// The operations: a trigger of Run or RunTx (fn succeeds, fails, fails after its
// effect, fails with NothingHappened or Permanent, panics, stalls past its
// lease and returns CheckLease's error, or runs long while its heartbeat
// renews), with a crash (CrashWhen) at any point; CatchUp with each policy
// (CatchUpAll with and without a cap, CatchUpLatest, ContinueAfterFailure,
// Since), and CatchUpTx when h.Tx.CatchUp is set, including a job's first
// period failing; Resolve (done, retry);
// Prune; the clock jumping forward and back; a second trigger while a
// first holds the key (and stalls past its lease). Jobs run in each mode
// (AtLeastOnce, AtMostOnce, TwoPhase, and RunTx when h.Tx is set), each
// with its promise checked: AtLeastOnce's done key had its effect,
// AtMostOnce's never twice, TwoPhase's done key exactly once, RunTx's
// business write committed exactly once.
//
// Runs use a fake clock given to h.Open, with idem.OneAttempt and a fixed
// backoff (idem.MaxAttempts(3, idem.Constant(30m30s))), a lease of
// 10m30s, and the periods of idem.Daily(time.UTC). h.Watermark selects the
// state file's semantics (one watermark and one pending period per job);
// without h.LeaseExpiry, a running attempt holds a lock that only its end
// releases. For a store on its own clock, h.Shift is called with every
// forward move of the clock, and also with negative durations that cancel
// the real time passed between operations.
//
// On a mismatch it prints the seed, the step, the operation and what
// differs, then shrinks the sequence (removing operations while it still
// fails) and prints the shortest one found as a numbered list. Reproduce
// with the environment variables it names.
func TestModel(t *testing.T, h Harness, o ModelOptions) {
	o = o.fromEnv(t)
	cfg := newModelConfig(h)
	t.Logf("model: %d operations from seed %d in sequences of %d (IDEM_MODEL_OPS, IDEM_MODEL_SEED, IDEM_MODEL_LEN)", o.Ops, o.Seed, o.Len)
	began := time.Now()
	tally := map[string]int{}
	type sequence struct {
		seed uint64
		r    *seqResult
	}
	var seqs []sequence
	run := func(t *testing.T) {
		for i, done := 0, 0; done < o.Ops; i++ {
			n := min(o.Len, o.Ops-done)
			seed := o.Seed + uint64(i)
			r := runSequence(t, h, cfg, o, seed, n, nil)
			seqs = append(seqs, sequence{seed, r})
			if !o.Parallel && (r.fatal != "" || r.fail != nil) {
				break
			}
			done += n
		}
	}
	if o.Parallel {
		t.Run("parallel", run) // returns when every sequence has ended
	} else {
		run(t)
	}
	for _, sq := range seqs {
		if sq.r.fatal != "" {
			t.Fatalf("model: seed %d: %s", sq.seed, sq.r.fatal)
		}
		if sq.r.fail != nil {
			reportFailure(t, h, cfg, o, sq.seed, *sq.r)
			return
		}
		for k, v := range sq.r.tally {
			tally[k] += v
		}
	}
	var kinds []string
	for k, v := range tally {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(kinds)
	t.Logf("model: %d operations passed in %s; the model expected: %s", o.Ops, time.Since(began).Round(time.Millisecond), strings.Join(kinds, ", "))
}

func (o ModelOptions) fromEnv(t *testing.T) ModelOptions {
	num := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive number", name, v)
			}
			*dst = n
		}
	}
	num("IDEM_MODEL_OPS", &o.Ops)
	num("IDEM_MODEL_LEN", &o.Len)
	if v := os.Getenv("IDEM_MODEL_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("IDEM_MODEL_SEED=%q: want a number", v)
		}
		o.Seed = s
	}
	if o.Ops <= 0 {
		o.Ops = 2000
	}
	if o.Len <= 0 {
		o.Len = 500
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	if o.StepTimeout <= 0 {
		o.StepTimeout = time.Minute
	}
	return o
}

// ---- jobs ----

// modelConfig names the jobs of a sequence: a plain job per mode, whose
// periods are triggered with Run (RunTx), and a catch-up job per mode,
// triggered with CatchUp (CatchUpTx) and by hand with Run.
type modelConfig struct {
	modes map[string]mMode
	jobs  []string // all, sorted
	plain []string
	cu    []string
	nonTx []string
}

func newModelConfig(h Harness) *modelConfig {
	c := &modelConfig{modes: map[string]mMode{
		"alo": modeALO, "amo": modeAMO, "tp": modeTP,
		"cu-alo": modeALO, "cu-amo": modeAMO, "cu-tp": modeTP,
	}}
	if h.Tx != nil {
		c.modes["tx"] = modeTx
		if h.Tx.CatchUp != nil {
			c.modes["cu-tx"] = modeTx
		}
	}
	for j, m := range c.modes {
		c.jobs = append(c.jobs, j)
		if strings.HasPrefix(j, "cu-") {
			c.cu = append(c.cu, j)
		} else {
			c.plain = append(c.plain, j)
		}
		if m != modeTx {
			c.nonTx = append(c.nonTx, j)
		}
	}
	for _, s := range [][]string{c.jobs, c.plain, c.cu, c.nonTx} {
		slices.Sort(s)
	}
	return c
}

// ---- operations ----

type opKind int

const (
	opRun     opKind = iota // trigger Run (RunTx for the tx job)
	opCatchUp               // CatchUp of a catch-up job
	opResolve               // Resolve by an operator
	opPrune                 // Prune
	opClock                 // the clock jumps
	opOverlap               // a trigger while another holds the key
)

// mOp is one operation of a sequence.
type mOp struct {
	kind     opKind
	key      idem.Key // run, resolve, overlap: the first trigger's key
	fn       mFn      // run; overlap: the second trigger's fn
	fns      []mFn    // catch-up: the calls of fn in order (then fnOK)
	crash    mCrash   // run, catch-up, overlap's second trigger
	hasFails bool     // TwoPhase's check errs during the operation
	cu       catchUpOp
	to       idem.Resolution
	through  string        // prune
	job      string        // prune
	d        time.Duration // clock; overlap: how long the first holder stalls (0: not at all)
	keyB     idem.Key      // overlap: the second trigger's key
	noCheck  bool          // overlap: the first holder applies its effect without CheckLease
	probe    idem.Key      // a key to look up after the operation
}

func (f mFn) String() string {
	switch f.kind {
	case fnOK:
		return "ok"
	case fnFail:
		return "fail"
	case fnFailAfter:
		return "fail-after-effect"
	case fnNothing:
		return "fail-nothing-happened"
	case fnPermanent:
		return "fail-permanent"
	case fnPanic:
		return "panic-after-effect"
	case fnStall:
		return fmt.Sprintf("stall(%s, then CheckLease)", f.d)
	case fnSlow:
		return fmt.Sprintf("slow(%d×%s with renewals)", f.n, mTick)
	}
	return fmt.Sprintf("fn(%d)", f.kind)
}

func (c mCrash) String() string {
	if c.point == "" {
		return ""
	}
	return fmt.Sprintf(" crash-at=%s#%d", c.point, c.nth)
}

func (op mOp) String() string {
	hf := ""
	if op.hasFails {
		hf = " (TwoPhase check fails)"
	}
	switch op.kind {
	case opRun:
		return fmt.Sprintf("Run %s fn=%s%s%s", op.key, op.fn, op.crash, hf)
	case opCatchUp:
		pol := "default"
		switch {
		case op.cu.latest:
			pol = "CatchUpLatest"
		case op.cu.max >= 0:
			pol = fmt.Sprintf("CatchUpAll(%d)", op.cu.max)
		}
		if op.cu.keepGoing {
			pol += "+ContinueAfterFailure"
		}
		if op.cu.since != "" {
			pol += " Since(" + op.cu.since + ")"
		}
		fns := make([]string, len(op.fns))
		for i, f := range op.fns {
			fns[i] = f.String()
		}
		return fmt.Sprintf("CatchUp %s %s fns=[%s]%s%s", op.cu.job, pol, strings.Join(fns, " "), op.crash, hf)
	case opResolve:
		return fmt.Sprintf("Resolve %s %s", op.key, map[idem.Resolution]string{idem.ResolveDone: "done", idem.ResolveRetry: "retry"}[op.to])
	case opPrune:
		return fmt.Sprintf("Prune %s through %s", op.job, op.through)
	case opClock:
		if op.d < 0 {
			return fmt.Sprintf("clock jumps back %s", -op.d)
		}
		return fmt.Sprintf("clock +%s", op.d)
	case opOverlap:
		a := "CheckLease, effect"
		if op.noCheck {
			a = "effect without CheckLease"
		}
		stall := ""
		if op.d > 0 {
			stall = fmt.Sprintf("; it stalls %s", op.d)
		}
		return fmt.Sprintf("Overlap: A triggers %s and holds it in fn%s; B: Run %s fn=%s%s; A resumes (%s)%s",
			op.key, stall, op.keyB, op.fn, op.crash, a, hf)
	}
	return "?"
}

// ---- generator ----

// gen draws operations, looking at the model's state to pick keys that
// matter (a pending period, a key to resolve).
type gen struct {
	r   *rand.Rand
	m   *model
	cfg *modelConfig
	cu  bool // the store is a CatchUpStore
}

func (g *gen) pick(s []string) string { return s[g.r.IntN(len(s))] }

func (g *gen) minutes(lo, hi int) time.Duration {
	return time.Duration(lo+g.r.IntN(hi-lo+1)) * time.Minute
}

func (g *gen) op() mOp {
	op := mOp{probe: g.key(g.pick(g.cfg.jobs))}
	x := g.r.IntN(100)
	switch {
	case x < 15 && g.cu:
		op.kind = opCatchUp
		op.cu = catchUpOp{job: g.pick(g.cfg.cu), max: -1}
		switch y := g.r.IntN(100); {
		case y < 20:
			op.cu.max = 0
		case y < 40:
			op.cu.max = 1 + g.r.IntN(3)
		case y < 65:
			op.cu.latest = true
		}
		op.cu.keepGoing = g.r.IntN(10) < 3
		if c, _ := g.m.jobState(op.cu.job); c == "" && g.r.IntN(2) == 0 {
			op.cu.since = addDays(day(g.m.now), -1-g.r.IntN(4))
		}
		for i := range 1 + g.r.IntN(4) {
			f := g.fn(g.cfg.modes[op.cu.job] == modeTx, true)
			if i == 0 && g.r.IntN(10) < 4 { // often the first period fails
				f = mFn{kind: []fnKind{fnFail, fnFailAfter, fnNothing, fnPermanent}[g.r.IntN(4)]}
			}
			op.fns = append(op.fns, f)
		}
		op.crash = g.crash(12)
		op.hasFails = g.r.IntN(20) == 0
	case x < 30:
		op.kind = opClock
		switch y := g.r.IntN(10); {
		case y < 4:
			op.d = g.minutes(1, 20)
		case y < 7:
			op.d = g.minutes(30, 240)
		case y < 9:
			op.d = time.Duration(1+g.r.IntN(3))*24*time.Hour + g.minutes(0, 120)
		default:
			op.d = -g.minutes(1, 2880)
		}
		if end := mStart.Add(mSpan); g.m.now.Add(op.d).After(end) && op.d > 0 {
			op.d = -op.d
		}
		if g.m.now.Add(op.d).Before(mStart) && op.d < 0 {
			op.d = -op.d
		}
	case x < 39:
		op.kind = opResolve
		op.key = g.unsettled()
		op.to = idem.ResolveRetry
		if g.r.IntN(10) < 3 {
			op.to = idem.ResolveDone
		}
	case x < 44 && g.cu:
		op.kind = opPrune
		op.job = g.pick(g.cfg.jobs)
		if cursor, _ := g.m.jobState(op.job); cursor != "" {
			op.through = addDays(cursor, g.r.IntN(5)-3)
		} else {
			op.through = addDays(day(g.m.now), g.r.IntN(7)-6)
		}
	case x < 52:
		op.kind = opOverlap
		job := g.pick(g.cfg.nonTx)
		op.key = g.key(job)
		op.keyB = op.key
		if g.r.IntN(5) == 0 {
			op.keyB = g.key(job)
		}
		if g.r.IntN(2) == 0 {
			op.d = g.minutes(11, 30)
		}
		op.fn = g.fn(false, false)
		op.noCheck = g.cfg.modes[job] == modeALO && g.r.IntN(10) < 3
		op.crash = g.crash(10)
		op.hasFails = g.r.IntN(20) == 0
	default:
		op.kind = opRun
		job := g.pick(g.cfg.jobs)
		op.key = g.key(job)
		op.fn = g.fn(g.cfg.modes[job] == modeTx, true)
		op.crash = g.crash(15)
		op.hasFails = g.r.IntN(20) == 0
	}
	return op
}

// fn draws what a call of fn does. A RunTx fn has no lease to lose (no
// heartbeat runs while its transaction holds the key), and the second
// trigger of an overlap must not move the clock.
func (g *gen) fn(tx, clock bool) mFn {
	x := g.r.IntN(100)
	var f mFn
	switch {
	case x < 40:
		f.kind = fnOK
	case x < 53:
		f.kind = fnFail
	case x < 60:
		f.kind = fnFailAfter
	case x < 67:
		f.kind = fnNothing
	case x < 71:
		f.kind = fnPermanent
	case x < 75:
		f.kind = fnPanic
	case x < 87:
		f = mFn{kind: fnStall, d: g.minutes(11, 30)}
	default:
		f = mFn{kind: fnSlow, n: 1 + g.r.IntN(4)}
	}
	if (tx || !clock) && (f.kind == fnStall || f.kind == fnSlow) {
		f = mFn{kind: fnOK}
	}
	return f
}

func (g *gen) crash(percent int) mCrash {
	if g.r.IntN(100) >= percent {
		return mCrash{}
	}
	ps := idemstore.Points()
	return mCrash{point: ps[g.r.IntN(len(ps))], nth: 1 + g.r.IntN(2)}
}

// key picks a period of job near today: for a watermark, mostly its
// pending period or the next ones; for a ledger, sometimes a key whose
// record is not settled.
func (g *gen) key(job string) idem.Key {
	today := day(g.m.now)
	x := g.r.IntN(10)
	if g.m.wm {
		if f := g.m.job(job).file; f != nil {
			if f.pending != "" && x < 5 {
				return idem.Key{Job: job, Period: f.pending}
			}
			if f.lastDone != "" && x < 8 {
				return idem.Key{Job: job, Period: addDays(f.lastDone, 1+g.r.IntN(2))}
			}
		}
	} else if x < 3 {
		var open []string
		for k, r := range g.m.recs {
			if k.Job == job && r.status != idem.StatusDone && r.status != idem.StatusSkipped {
				open = append(open, k.Period)
			}
		}
		if len(open) > 0 {
			slices.Sort(open)
			return idem.Key{Job: job, Period: g.pick(open)}
		}
	}
	return idem.Key{Job: job, Period: addDays(today, g.r.IntN(6)-4)}
}

// unsettled picks a key to resolve: mostly one that needs a person.
func (g *gen) unsettled() idem.Key {
	if g.r.IntN(10) < 7 {
		var open []idem.Key
		for k, r := range g.m.records() {
			if r.status != idem.StatusDone && r.status != idem.StatusSkipped {
				open = append(open, k)
			}
		}
		if len(open) > 0 {
			slices.SortFunc(open, keyOrder)
			return open[g.r.IntN(len(open))]
		}
	}
	return g.key(g.pick(g.cfg.jobs))
}

// ---- the clock of the Runs ----

// mclock is the fake clock of the model's Runs. Time moves only when the
// driver moves it; a move either fires the timers that are due (the
// heartbeat renews) or not (the process stalled: its heartbeat did not
// run).
type mclock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	changed chan struct{}
}

func newMClock(t time.Time) *mclock { return &mclock{now: t, changed: make(chan struct{})} }

func (c *mclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *mclock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

func (c *mclock) move(d time.Duration, fire bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if !fire {
		return
	}
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// clear forgets every timer: between runs, only finished heartbeats' are
// left.
func (c *mclock) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters = nil
}

// waitArmed waits until a timer is pending (the running attempt's
// heartbeat waits for its next renewal), for at most timeout.
func (c *mclock) waitArmed(what string, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		n, ch := len(c.waiters), c.changed
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("idemtest: model: waited %s for %s; goroutines:\n%s", timeout, what, goroutines())
		}
	}
}

func goroutines() string {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}

// ---- the real store ----

var errModelFn = errors.New("idemtest: model: fn failed")

// modelPanic is what a panicking fn panics with.
type modelPanic struct{ key idem.Key }

// world is the real side of a sequence: the store, the clock, the effects.
type world struct {
	t        *testing.T
	h        Harness
	cfg      *modelConfig
	s        idemstore.Store
	cs       idemstore.CatchUpStore // nil when the store is not one
	clk      *mclock
	wait     time.Duration // bound of each wait inside an operation
	hasFails atomic.Bool
	synced   time.Time // stores on their own clock: when real time was last cancelled

	mu      sync.Mutex
	effects map[idem.Key]int
	stuck   []string // waits that gave up

	seen  map[idem.Key]int64 // the highest attempt number seen per key
	steps int                // operations run so far
}

func (w *world) effect(k idem.Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.effects[k]++
}

func (w *world) count(k idem.Key) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.effects[k]
}

func (w *world) gaveUp(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stuck = append(w.stuck, msg)
}

var errCheckFails = errors.New("idemtest: model: the downstream check fails")

func (w *world) has(_ context.Context, k idem.Key) (bool, error) {
	if w.hasFails.Load() {
		return false, errCheckFails
	}
	return w.count(k) > 0, nil
}

// move makes d pass; a store on its own clock follows forward moves.
func (w *world) move(d time.Duration, fire bool) {
	if d > 0 && w.h.Shift != nil {
		w.h.Shift(w.t, w.s, d)
	}
	w.clk.move(d, fire)
}

// sync cancels the real time passed since the last sync on a store that
// keeps its own clock, so its deadlines stay where the model has them
// (within a second or so; the model keeps every deadline half a minute off
// the clock's minutes).
func (w *world) sync() {
	if w.h.Shift == nil {
		return
	}
	if e := time.Since(w.synced); e > time.Second {
		w.h.Shift(w.t, w.s, -e)
		w.synced = w.synced.Add(e)
	}
}

// base is the options of every call of the model's jobs, but their mode.
func (w *world) base() []idem.Option {
	return []idem.Option{idem.WithClock(w.clk), idem.WithLease(mLease),
		idem.WithBackoff(idem.MaxAttempts(mMaxAttempts, idem.Constant(mBackoff)))}
}

// mode is the mode option of a job in mode (the transactional calls take
// none).
func (w *world) mode(mode mMode) idem.Option {
	switch mode {
	case modeAMO:
		return idem.AtMostOnce()
	case modeTP:
		return idem.TwoPhase(w.has)
	}
	return idem.AtLeastOnce()
}

// optsOf is base's options as options of one call, followed by more.
func optsOf[O any](base []idem.Option, more ...O) []O {
	out := make([]O, 0, len(base)+len(more))
	for _, o := range base {
		out = append(out, any(o).(O))
	}
	return append(out, more...)
}

// queue returns the behaviours of fn's calls in order, then fnOK.
func queue(fns []mFn) func() mFn {
	i := 0
	return func() mFn {
		if i < len(fns) {
			i++
			return fns[i-1]
		}
		return mFn{kind: fnOK}
	}
}

// behave does what b says, as fn of k.
func (w *world) behave(ctx context.Context, k idem.Key, b mFn, tx bool) error {
	switch b.kind {
	case fnOK, fnStall, fnSlow:
		if tx {
			return nil // the business write is the effect
		}
	}
	switch b.kind {
	case fnOK:
		w.effect(k)
		return nil
	case fnFail:
		return errModelFn
	case fnFailAfter:
		if !tx {
			w.effect(k)
		}
		return errModelFn
	case fnNothing:
		return idem.NothingHappened(errModelFn)
	case fnPermanent:
		return idem.Permanent(errModelFn)
	case fnPanic:
		if !tx {
			w.effect(k)
		}
		panic(modelPanic{k})
	case fnStall:
		w.move(b.d, false)
		return idem.CheckLease(ctx)
	case fnSlow:
		for range b.n {
			if err := w.clk.waitArmed("the heartbeat's timer", w.wait); err != nil {
				w.gaveUp(err.Error())
				return err
			}
			w.move(mTick, true)
			if err := w.clk.waitArmed("the heartbeat's renewal", w.wait); err != nil {
				w.gaveUp(err.Error())
				return err
			}
		}
		if err := idem.CheckLease(ctx); err != nil {
			return err
		}
		w.effect(k)
		return nil
	}
	return fmt.Errorf("idemtest: model: fn kind %d", b.kind)
}

func (w *world) fn(next func() mFn, tx bool) func(context.Context) error {
	return func(ctx context.Context) error {
		info, ok := idem.InfoFrom(ctx)
		if !ok {
			return errors.New("idemtest: model: fn's context carries no idem.Info")
		}
		return w.behave(ctx, info.Key, next(), tx)
	}
}

func crashCtx(ctx context.Context, c mCrash) context.Context {
	if c.point == "" {
		return ctx
	}
	n := 0
	return CrashWhen(ctx, func(p idemstore.Point, _ idem.Key) bool {
		if p != c.point {
			return false
		}
		n++
		return n == c.nth
	})
}

// rResult is how a real call ended.
type rResult struct {
	outcome  idem.Outcome
	err      error
	crashed  bool
	panicked bool
	bad      string // a panic that is not fn's
}

// catch recovers fn's panic into r.
func catch(r *rResult) {
	if p := recover(); p != nil {
		if _, ok := p.(modelPanic); ok {
			r.panicked = true
			return
		}
		r.bad = fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
	}
}

func (w *world) trigger(ctx context.Context, k idem.Key, fn func(context.Context) error, crash mCrash) (r rResult) {
	var res idem.Result
	func() {
		defer catch(&r)
		mode := w.cfg.modes[k.Job]
		ctx := crashCtx(ctx, crash)
		if mode == modeTx {
			r.err = w.h.Tx.Run(ctx, w.s, k, fn, optsOf[idem.Option](w.base(), idem.OneAttempt(), idem.ReportTo(&res))...)
			return
		}
		r.err = idem.RunOn(ctx, w.s, k, fn, optsOf[idem.Option](w.base(), w.mode(mode), idem.OneAttempt(), idem.ReportTo(&res))...)
	}()
	r.outcome, r.crashed = res.Outcome, errors.Is(r.err, ErrCrashed)
	return r
}

// rCatchUp is how a real CatchUp ended.
type rCatchUp struct {
	res idem.CatchUpResult
	rResult
}

// rStep is what the real side of an operation gave.
type rStep struct {
	a, b    rResult // run: a; overlap: a (first trigger) and b
	aInFn   bool    // overlap: the first trigger reached fn
	cu      rCatchUp
	resolve error
	deleted int64
	prune   error
}

func (w *world) exec(ctx context.Context, op mOp) (st rStep) {
	w.clk.clear()
	w.sync()
	w.hasFails.Store(op.hasFails)
	defer w.hasFails.Store(false)
	switch op.kind {
	case opRun:
		st.a = w.trigger(ctx, op.key, w.fn(queue([]mFn{op.fn}), w.cfg.modes[op.key.Job] == modeTx), op.crash)
	case opCatchUp:
		var res idem.CatchUpResult
		func() {
			defer catch(&st.cu.rResult)
			opts := []idem.Option{idem.OnPeriod(func(idem.PeriodResult) { w.clk.clear() })}
			switch {
			case op.cu.latest:
				opts = append(opts, idem.CatchUpLatest())
			case op.cu.max >= 0:
				opts = append(opts, idem.CatchUpAll(op.cu.max))
			}
			if op.cu.keepGoing {
				opts = append(opts, idem.ContinueAfterFailure())
			}
			if op.cu.since != "" {
				t, _ := time.Parse(time.DateOnly, op.cu.since)
				opts = append(opts, idem.Since(t))
			}
			next := queue(op.fns)
			tx := w.cfg.modes[op.cu.job] == modeTx
			fn := func(ctx context.Context, p idem.Period) error {
				info, ok := idem.InfoFrom(ctx)
				if !ok || info.Key != (idem.Key{Job: op.cu.job, Period: p.Name}) {
					return fmt.Errorf("idemtest: model: catch-up fn for %s has Info %+v", p.Name, info)
				}
				return w.behave(ctx, info.Key, next(), tx)
			}
			ctx := crashCtx(ctx, op.crash)
			if tx {
				txOpts := append(optsOf[idem.Option](w.base(), idem.OneAttempt()), opts...)
				res, st.cu.err = w.h.Tx.CatchUp(ctx, w.s, op.cu.job, idem.Daily(time.UTC), fn, txOpts...)
				return
			}
			cuOpts := append(optsOf[idem.Option](w.base(), w.mode(w.cfg.modes[op.cu.job]), idem.OneAttempt()), opts...)
			res, st.cu.err = idem.CatchUp(ctx, w.cs, op.cu.job, idem.Daily(time.UTC), fn, cuOpts...)
		}()
		st.cu.res = res
	case opResolve:
		st.resolve = w.s.Resolve(ctx, op.key, op.to)
	case opPrune:
		st.deleted, st.prune = w.cs.Prune(ctx, op.job, op.through)
	case opClock:
		w.move(op.d, true)
	case opOverlap:
		st.a, st.b, st.aInFn = w.overlap(ctx, op)
	}
	return st
}

// overlap: A triggers op.key and holds it inside fn; the clock moves op.d
// without A's heartbeat running; B triggers op.keyB; A resumes.
func (w *world) overlap(ctx context.Context, op mOp) (a, b rResult, inFn bool) {
	started, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan rResult, 1)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		aDone <- w.trigger(actx, op.key, func(ctx context.Context) error {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if !op.noCheck {
				if err := idem.CheckLease(ctx); err != nil {
					return err
				}
			}
			w.effect(op.key)
			return nil
		}, mCrash{})
	}()
	ended := false
	wait := time.NewTimer(w.wait)
	select {
	case <-started:
		inFn = true
	case a = <-aDone:
		ended = true
	case <-wait.C:
		w.gaveUp(fmt.Sprintf("overlap: waited %s for A's fn to start or A to end; goroutines:\n%s", w.wait, goroutines()))
		cancel()
	}
	wait.Stop()
	if op.d > 0 {
		w.move(op.d, false)
	}
	b = w.trigger(ctx, op.keyB, w.fn(queue([]mFn{op.fn}), false), op.crash)
	close(release)
	if !ended {
		wait := time.NewTimer(w.wait)
		defer wait.Stop()
		select {
		case a = <-aDone:
		case <-wait.C:
			w.gaveUp(fmt.Sprintf("overlap: waited %s for A to end after its release; goroutines:\n%s", w.wait, goroutines()))
			cancel()
			a = <-aDone
		}
	}
	return a, b, inFn
}

// ---- the model's side of an operation ----

// mStep is what the model expects of an operation.
type mStep struct {
	a, b    mResult
	aInFn   bool
	cu      mCatchUpResult
	resolve resolveErr
	deleted int64
	refused bool
}

func (m *model) apply(op mOp) (st mStep) {
	m.hasFails = op.hasFails
	defer func() { m.hasFails = false }()
	switch op.kind {
	case opRun:
		st.a = m.run(op.key, queue([]mFn{op.fn}), newCrash(op.crash), false)
	case opCatchUp:
		st.cu = m.catchUp(op.cu, queue(op.fns), newCrash(op.crash))
	case opResolve:
		st.resolve, _ = m.resolve(op.key, op.to, nil)
		if st.resolve == resolveOK {
			m.byOperator[op.key] = true
		}
	case opPrune:
		st.deleted, st.refused = m.prune(op.job, op.through)
	case opClock:
		m.move(op.d)
	case opOverlap:
		ra, f := m.begin(op.key, nil, false)
		if op.d > 0 {
			m.move(op.d)
		}
		st.b = m.run(op.keyB, queue([]mFn{op.fn}), newCrash(op.crash), false)
		st.a = ra
		if f != nil {
			st.aInFn = true
			st.a = m.resume(f, op.noCheck)
		}
	}
	return st
}

// count tallies what the model expected of op.
func (st mStep) count(op mOp, tally map[string]int) {
	switch op.kind {
	case opRun:
		tally["run:"+st.a.String()]++
	case opOverlap:
		tally["overlap-A:"+st.a.String()]++
		tally["overlap-B:"+st.b.String()]++
	case opCatchUp:
		tally["catch-up"]++
		if st.cu.panicked {
			tally["catch-up:fn's panic"]++
		}
		for _, p := range st.cu.periods {
			o := p.outcome.String()
			if p.crashed {
				o = "crashed (ErrCrashed)"
			}
			tally["catch-up-period:"+o]++
		}
	case opResolve:
		tally[fmt.Sprintf("resolve:%v", map[resolveErr]string{resolveOK: "ok", resolveNot: "not-resolvable", resolveOutOfOrder: "out-of-order"}[st.resolve])]++
	case opPrune:
		if st.refused {
			tally["prune:refused"]++
		} else {
			tally["prune:ok"]++
		}
	case opClock:
		tally["clock"]++
	}
}

// ---- comparison ----

func (r mResult) String() string {
	switch {
	case r.crashed:
		return "crashed (ErrCrashed)"
	case r.panicked:
		return "fn's panic"
	}
	return r.outcome.String()
}

func (r rResult) String() string {
	s := r.outcome.String()
	switch {
	case r.crashed:
		s = "crashed (ErrCrashed)"
	case r.panicked:
		s = "fn's panic"
	}
	if r.err != nil && !r.crashed {
		s += " (" + r.err.Error() + ")"
	}
	return s
}

// resultDiff compares a run's end with the model's.
func resultDiff(what string, want mResult, got rResult) string {
	switch {
	case got.bad != "":
		return fmt.Sprintf("%s: want %s, got %s", what, want, got.bad)
	case want.crashed != got.crashed || want.panicked != got.panicked:
	case want.crashed || want.panicked:
		return ""
	case want.outcome != got.outcome || (got.err == nil) != want.ok():
	default:
		return ""
	}
	return fmt.Sprintf("%s: want %s, got %s", what, want, got)
}

func recString(r mRec, ok bool, times bool) string {
	if !ok {
		return "no record"
	}
	s := fmt.Sprintf("%s attempt=%d failures=%d", r.status, r.attempt, r.failures)
	if times {
		if !r.leaseUntil.IsZero() {
			s += " lease-until=" + r.leaseUntil.UTC().Format(time.RFC3339)
		}
		if !r.notBefore.IsZero() {
			s += " not-before=" + r.notBefore.UTC().Format(time.RFC3339)
		}
	}
	return s
}

func fromRecord(r idemstore.Record) mRec {
	return mRec{status: r.Status, attempt: r.Attempt, failures: r.Failures, leaseUntil: r.LeaseUntil, notBefore: r.NotBefore}
}

// sameRec compares a store's record with the model's. The times of a store
// on its own clock are its own: only whether they are set is compared.
func (w *world) sameRec(want mRec, wantOK bool, got mRec, gotOK bool) bool {
	if wantOK != gotOK {
		return false
	}
	if !wantOK {
		return true
	}
	if want.status != got.status || want.attempt != got.attempt || want.failures != got.failures {
		return false
	}
	if w.h.Shift != nil {
		return want.leaseUntil.IsZero() == got.leaseUntil.IsZero() && want.notBefore.IsZero() == got.notBefore.IsZero()
	}
	return want.leaseUntil.Equal(got.leaseUntil) && want.notBefore.Equal(got.notBefore)
}

// compare checks the operation's results and the store's whole state
// against the model, and returns what differs.
func (w *world) compare(ctx context.Context, m *model, op mOp, want mStep, got rStep) []string {
	var d []string
	w.mu.Lock()
	d = append(d, w.stuck...)
	w.stuck = nil
	w.mu.Unlock()

	// The operation's own results.
	opD, touched := w.opDiff(m, op, want, got)
	d = append(d, opD...)
	if got := w.clk.Now(); !got.Equal(m.now) {
		d = append(d, fmt.Sprintf("clock: the model is at %s, the Runs' clock at %s", m.now.Format(time.RFC3339), got.Format(time.RFC3339)))
	}
	// Every record.
	times := w.h.Shift == nil
	listD, unlisted := w.listDiff(ctx, m, times)
	d = append(d, listD...)
	touched = append(touched, unlisted...)
	// The business writes, read once: the promises of RunTx's keys below
	// and the count of every key at the end compare with them.
	var rows map[idem.Key]int
	rowsOK := false
	if w.h.Tx != nil {
		var err error
		if rows, err = w.h.Tx.Rows(ctx, w.s); err != nil {
			d = append(d, fmt.Sprintf("business rows: %v", err))
		}
		rowsOK = err == nil
	}
	// Lookup of the keys the operation touched, and a probe.
	slices.SortFunc(touched, keyOrder)
	touched = slices.Compact(touched)
	d = append(d, w.lookupDiff(ctx, m, touched, times, rows, rowsOK)...)
	d = append(d, w.jobDiff(ctx, m, op, touched)...)
	// The effects, and the business writes.
	w.mu.Lock()
	eff := maps(w.effects)
	w.mu.Unlock()
	d = append(d, countDiff("effects of fn", m.effects, eff)...)
	if rowsOK {
		d = append(d, countDiff("business rows", m.rows, rows)...)
	}
	return d
}

// opDiff compares what op returned (got) with what the model says it
// returns (want), and returns the differences and the keys op touched
// (with its probe), whose records compare after it.
func (w *world) opDiff(m *model, op mOp, want mStep, got rStep) (d []string, touched []idem.Key) {
	add := func(s string) {
		if s != "" {
			d = append(d, s)
		}
	}
	touched = []idem.Key{op.probe}
	switch op.kind {
	case opRun:
		add(resultDiff("Run "+op.key.String(), want.a, got.a))
		touched = append(touched, op.key)
	case opOverlap:
		if want.aInFn != got.aInFn {
			add(fmt.Sprintf("overlap: A reached fn: want %v, got %v", want.aInFn, got.aInFn))
		}
		add(resultDiff("overlap: A's Run "+op.key.String(), want.a, got.a))
		add(resultDiff("overlap: B's Run "+op.keyB.String(), want.b, got.b))
		touched = append(touched, op.key, op.keyB)
	case opCatchUp:
		d = append(d, w.catchUpDiff(m, op, want.cu, got.cu)...)
		for _, p := range want.cu.periods {
			touched = append(touched, idem.Key{Job: op.cu.job, Period: p.period})
		}
	case opResolve:
		wantErr := map[resolveErr]error{resolveNot: idem.ErrNotResolvable, resolveOutOfOrder: idem.ErrOutOfOrder}[want.resolve]
		if (wantErr == nil) != (got.resolve == nil) || (wantErr != nil && !errors.Is(got.resolve, wantErr)) {
			add(fmt.Sprintf("Resolve %s: want error %v, got %v", op.key, wantErr, got.resolve))
		}
		touched = append(touched, op.key)
	case opPrune:
		switch {
		case want.refused && !errors.Is(got.prune, idem.ErrPruneRefused):
			add(fmt.Sprintf("Prune %s through %s: want ErrPruneRefused, got %v (deleted %d)", op.job, op.through, got.prune, got.deleted))
		case !want.refused && (got.prune != nil || got.deleted != want.deleted):
			add(fmt.Sprintf("Prune %s through %s: want %d deleted, got %d, %v", op.job, op.through, want.deleted, got.deleted, got.prune))
		}
	}
	return d, touched
}

// listDiff compares every record the store lists with the model's (times:
// compare their times too), and checks that no attempt number went back.
// A store that cannot list (no idemstore.Lister) has its records compared
// by Lookup instead: listDiff returns the model's keys for that.
func (w *world) listDiff(ctx context.Context, m *model, times bool) (d []string, unlisted []idem.Key) {
	wantRecs := m.records()
	ls, ok := w.s.(idemstore.Lister)
	if !ok {
		for k := range wantRecs {
			unlisted = append(unlisted, k)
		}
		return nil, unlisted
	}
	recs, err := ls.List(ctx, idemstore.Filter{})
	if err != nil {
		d = append(d, fmt.Sprintf("List: %v", err))
	}
	gotRecs := map[idem.Key]mRec{}
	for _, r := range recs {
		gotRecs[r.Key] = fromRecord(r)
		if r.Attempt < w.seen[r.Key] {
			d = append(d, fmt.Sprintf("%s: attempt number went back from %d to %d", r.Key, w.seen[r.Key], r.Attempt))
		}
		w.seen[r.Key] = max(w.seen[r.Key], r.Attempt)
	}
	for _, k := range sortedKeys(wantRecs, gotRecs) {
		wr, wok := wantRecs[k]
		gr, gok := gotRecs[k]
		if !w.sameRec(wr, wok, gr, gok) {
			d = append(d, fmt.Sprintf("List %s: want %s, got %s", k, recString(wr, wok, times), recString(gr, gok, times)))
		}
	}
	return d, nil
}

// lookupDiff compares the store's Lookup of each key (sorted, each once)
// with the model's, and checks the promises of its record (promises; rows
// are the business writes, when rowsOK).
func (w *world) lookupDiff(ctx context.Context, m *model, keys []idem.Key, times bool, rows map[idem.Key]int, rowsOK bool) (d []string) {
	for _, k := range keys {
		if k.Job == "" {
			continue
		}
		wr, wok := m.lookup(k)
		gr, gok, err := w.s.Lookup(ctx, k)
		if err != nil {
			d = append(d, fmt.Sprintf("Lookup %s: %v", k, err))
			continue
		}
		if !w.sameRec(wr, wok, fromRecord(gr), gok) {
			d = append(d, fmt.Sprintf("Lookup %s: want %s, got %s", k, recString(wr, wok, times), recString(fromRecord(gr), gok, times)))
		}
		d = append(d, w.promises(m, k, gr, gok, rows, rowsOK)...)
	}
	return d
}

// jobDiff compares the cursor and horizon of the jobs op touched (the jobs
// of the keys touched) and of one more in turn with the model's: an
// operation changes only its own job's.
func (w *world) jobDiff(ctx context.Context, m *model, op mOp, touched []idem.Key) (d []string) {
	if w.cs == nil {
		return nil
	}
	jobs := []string{w.cfg.jobs[w.steps%len(w.cfg.jobs)], op.cu.job, op.job}
	for _, k := range touched {
		jobs = append(jobs, k.Job)
	}
	slices.Sort(jobs)
	for _, job := range slices.Compact(jobs) {
		if job == "" {
			continue
		}
		js, err := w.cs.Job(ctx, job)
		if err != nil {
			d = append(d, fmt.Sprintf("Job %s: %v", job, err))
			continue
		}
		cursor, horizon := m.jobState(job)
		if js.Cursor != cursor || js.Horizon != horizon {
			d = append(d, fmt.Sprintf("Job %s: want cursor %q horizon %q, got cursor %q horizon %q", job, cursor, horizon, js.Cursor, js.Horizon))
		}
	}
	return d
}

func maps(m map[idem.Key]int) map[idem.Key]int {
	out := make(map[idem.Key]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](a, b map[idem.Key]V) []idem.Key {
	var ks []idem.Key
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, keyOrder)
	return ks
}

func keyOrder(a, b idem.Key) int {
	if c := strings.Compare(a.Job, b.Job); c != 0 {
		return c
	}
	return strings.Compare(a.Period, b.Period)
}

func countDiff(what string, want, got map[idem.Key]int) []string {
	var d []string
	for _, k := range sortedKeys(want, got) {
		if want[k] != got[k] {
			d = append(d, fmt.Sprintf("%s %s: want %d, got %d", what, k, want[k], got[k]))
		}
	}
	return d
}

// promises checks each mode's promise on the store's own answer for k (its
// record, the effects, the business rows), for keys a run settled and no
// operator overrode. rows are the business rows, when rowsOK (read
// without error).
func (w *world) promises(m *model, k idem.Key, rec idemstore.Record, ok bool, rows map[idem.Key]int, rowsOK bool) []string {
	if m.byOperator[k] {
		return nil
	}
	done := ok && rec.Status == idem.StatusDone && m.byRun[k]
	n := w.count(k)
	var d []string
	broken := func(format string, a ...any) {
		d = append(d, fmt.Sprintf("PROMISE BROKEN: %s %s: ", k, w.cfg.modes[k.Job])+fmt.Sprintf(format, a...))
	}
	switch w.cfg.modes[k.Job] {
	case modeALO:
		if done && n < 1 {
			broken("done with %d effects", n)
		}
	case modeAMO:
		if n > 1 {
			broken("%d effects", n)
		}
	case modeTP:
		if n > 1 || (done && n != 1) {
			broken("%s with %d effects", rec.Status, n)
		}
	case modeTx:
		if !rowsOK {
			return nil // compare reports the error of their read
		}
		if rows[k] > 1 || (done && rows[k] != 1) || (ok && rec.Status != idem.StatusDone && rows[k] != 0) {
			broken("%s with %d business rows", rec.Status, rows[k])
		}
	}
	return d
}

func (w *world) catchUpDiff(m *model, op mOp, want mCatchUpResult, got rCatchUp) []string {
	var d []string
	name := "CatchUp " + op.cu.job
	if got.bad != "" {
		return []string{name + ": " + got.bad}
	}
	if want.panicked != got.panicked {
		return []string{fmt.Sprintf("%s: fn's panic: want %v, got %v (%v)", name, want.panicked, got.panicked, got.err)}
	}
	if want.panicked {
		return nil
	}
	ps := got.res.Periods
	var gotS, wantS []string
	for _, p := range want.periods {
		s := p.period + ":" + p.outcome.String()
		if p.crashed {
			s = p.period + ":crashed"
		}
		wantS = append(wantS, s)
	}
	same := len(ps) == len(want.periods)
	for i, p := range ps {
		crashed := errors.Is(p.Err, ErrCrashed)
		s := p.Period.Name + ":" + p.Outcome.String()
		if crashed {
			s = p.Period.Name + ":crashed"
		}
		gotS = append(gotS, s)
		if same {
			wp := want.periods[i]
			if p.Period.Name != wp.period || (p.Err != nil) != wp.err || crashed != wp.crashed || (!crashed && p.Outcome != wp.outcome) {
				same = false
			}
		}
	}
	if !same {
		d = append(d, fmt.Sprintf("%s periods: want [%s], got [%s] (error: %v)", name, strings.Join(wantS, " "), strings.Join(gotS, " "), got.err))
	}
	if got.res.Deferred != want.deferred {
		d = append(d, fmt.Sprintf("%s deferred: want %d, got %d", name, want.deferred, got.res.Deferred))
	}
	if got.res.Cursor != want.cursor {
		d = append(d, fmt.Sprintf("%s result's cursor: want %q, got %q", name, want.cursor, got.res.Cursor))
	}
	if (got.err != nil) != want.err {
		d = append(d, fmt.Sprintf("%s error: want error %v, got %v", name, want.err, got.err))
	}
	return d
}

// ---- sequences ----

// mismatch is where a sequence diverged from the model.
type mismatch struct {
	step  int
	op    mOp
	diffs []string
}

type seqResult struct {
	tally map[string]int // what the model expected, by kind: to see what a run covered
	ops   []mOp
	at    []time.Time // the model's clock before each operation
	fail  *mismatch
	fatal string // the harness failed, or a step was stuck
}

// runSequence runs n generated operations from seed, or the operations
// given, on a new store, until the first mismatch. With o.Parallel, a
// generated sequence is a parallel subtest: its result is filled in when
// the subtest ends, after runSequence returns.
func runSequence(t *testing.T, h Harness, cfg *modelConfig, o ModelOptions, seed uint64, n int, given []mOp) *seqResult {
	name := fmt.Sprintf("seed=%d", seed)
	if given != nil {
		name, n = "replay", len(given)
	}
	out := &seqResult{tally: map[string]int{}}
	t.Run(name, func(t *testing.T) {
		if o.Parallel && given == nil {
			t.Parallel()
		}
		clk := newMClock(mStart)
		s, err := idemstore.Of(h.Open(t, clk))
		if err != nil {
			t.Errorf("idemtest: Harness.Open: %v", err)
		}
		if t.Failed() {
			out.fatal = "the harness's Open failed"
			return
		}
		ctx := context.Background()
		if h.Tx != nil && h.Tx.Setup != nil {
			if err := h.Tx.Setup(ctx, s); err != nil {
				out.fatal = "Tx.Setup: " + err.Error()
				return
			}
		}
		cs, _ := s.(idemstore.CatchUpStore)
		_, fresh := reflect.TypeOf(s).MethodByName("ClaimFinishTx")
		if _, first := s.(idemstore.ClaimFirst); first {
			fresh = false // its claim commits first: as Claim, then FinishTx
		}
		m := newModel(h.Watermark, !h.LeaseExpiry, h.Shift != nil, fresh, cfg.modes)
		w := &world{t: t, h: h, cfg: cfg, s: s, cs: cs, clk: clk, wait: o.StepTimeout / 2, synced: time.Now(),
			effects: map[idem.Key]int{}, seen: map[idem.Key]int64{}}
		var g *gen
		if given == nil {
			g = &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), m: m, cfg: cfg, cu: cs != nil}
		}
		for i := range n {
			op := mOp{}
			if g != nil {
				op = g.op()
			} else {
				op = given[i]
			}
			if cs == nil && (op.kind == opCatchUp || op.kind == opPrune) {
				continue
			}
			out.ops, out.at = append(out.ops, op), append(out.at, m.now)
			want := m.apply(op)
			want.count(op, out.tally)
			got, diffs, stuck := w.step(ctx, op, o.StepTimeout, m, want)
			if stuck != "" {
				out.fatal = fmt.Sprintf("step %d (%s) is stuck:\n%s", i+1, op, stuck)
				return
			}
			_ = got
			if len(diffs) > 0 {
				out.fail = &mismatch{step: len(out.ops), op: op, diffs: diffs}
				return
			}
		}
		if t.Failed() {
			out.fatal = "the harness failed (see above)"
		}
	})
	return out
}

// step runs op on the store under a deadline, and compares.
func (w *world) step(ctx context.Context, op mOp, timeout time.Duration, m *model, want mStep) (rStep, []string, string) {
	// Every store call has a deadline; the watchdog fires first, to print
	// where the step is stuck.
	sctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	done := make(chan rStep, 1)
	go func() { done <- w.exec(sctx, op) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var got rStep
	select {
	case got = <-done:
	case <-timer.C:
		dump := goroutines()
		cancel()
		return got, nil, fmt.Sprintf("no end after %s; goroutines:\n%s", timeout, dump)
	}
	cctx, ccancel := context.WithTimeout(ctx, timeout)
	defer ccancel()
	w.steps++
	return got, w.compare(cctx, m, op, want, got), ""
}

// reportFailure prints the failing sequence's seed and step, shrinks it,
// and prints the shortest failing sequence found.
func reportFailure(t *testing.T, h Harness, cfg *modelConfig, o ModelOptions, seed uint64, r seqResult) {
	f := r.fail
	t.Errorf("model: the store diverged from the model at step %d of the sequence of seed %d\n"+
		"reproduce: IDEM_MODEL_SEED=%d IDEM_MODEL_OPS=%d IDEM_MODEL_LEN=%d\n"+
		"operation: %s\n%s",
		f.step, seed, seed, f.step, f.step, f.op, indent(f.diffs))
	ops, last, replays := shrink(t, h, cfg, o, r)
	var b strings.Builder
	fmt.Fprintf(&b, "model: shrunk to %d operations (%d replays); it still fails at its last step:\n", len(ops), replays)
	for i, op := range ops {
		fmt.Fprintf(&b, "  %3d. [%s] %s\n", i+1, last.at[i].UTC().Format("2006-01-02 15:04"), op)
	}
	b.WriteString(indent(last.fail.diffs))
	t.Error(b.String())
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    " + strings.ReplaceAll(l, "\n", "\n    ") + "\n")
	}
	return b.String()
}

// shrink removes operations (delta debugging) while the sequence still
// fails, within a budget of replays and time.
func shrink(t *testing.T, h Harness, cfg *modelConfig, o ModelOptions, r seqResult) ([]mOp, seqResult, int) {
	cur, last := r.ops, r
	replays := 0
	deadline := time.Now().Add(5 * time.Minute)
	n := 2
	for len(cur) > 1 && replays < 1000 && time.Now().Before(deadline) {
		chunk := (len(cur) + n - 1) / n
		reduced := false
		for i := 0; i < len(cur) && replays < 1000 && time.Now().Before(deadline); i += chunk {
			cand := append(append([]mOp(nil), cur[:i]...), cur[min(i+chunk, len(cur)):]...)
			replays++
			rr := runSequence(t, h, cfg, o, 0, 0, cand)
			if rr.fail != nil {
				cur, last = rr.ops, *rr
				n = max(n-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if chunk == 1 {
				break
			}
			n = min(2*n, len(cur))
		}
	}
	// Then simplify what is left, one operation at a time.
	for i := 0; i < len(cur) && replays < 1000 && time.Now().Before(deadline); i++ {
		for changed := true; changed; { // each candidate is simpler than cur[i]: this ends
			changed = false
			for _, op := range simpler(cur[i]) {
				cand := slices.Clone(cur)
				cand[i] = op
				replays++
				if rr := runSequence(t, h, cfg, o, 0, 0, cand); rr.fail != nil && len(rr.ops) == len(cur) {
					cur, last, changed = rr.ops, *rr, true
					break
				}
			}
		}
	}
	return cur, last, replays
}

// simpler returns simpler versions of op, simplest first: without its
// crash, without a failing TwoPhase check, with fewer catch-up fns.
func simpler(op mOp) []mOp {
	var out []mOp
	if op.crash.point != "" {
		o := op
		o.crash = mCrash{}
		out = append(out, o)
	}
	if op.hasFails {
		o := op
		o.hasFails = false
		out = append(out, o)
	}
	for n := range len(op.fns) {
		o := op
		o.fns = op.fns[:n]
		out = append(out, o)
	}
	return out
}
