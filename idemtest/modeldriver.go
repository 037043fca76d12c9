package idemtest

// The driver of TestModel: its options, the jobs of a sequence, and the
// loop that runs each sequence on a new store, one operation at a time,
// the model's side first, then the store's under a deadline, then the
// comparison. The other files of the driver: model_tx.go (the RunTx
// harness), model_ops.go (the operations and their generator),
// model_clock.go (the fake clock of the Runs), model_world.go (the store's
// side of an operation), model_faults.go (what fn does, crashes, the
// failing TwoPhase check), model_compare.go (the checks against the model),
// model_rerun.go (re-run requests) and model_report.go (a failure's report
// and its shrinking).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
	// Faults adds store faults to the triggers of Run and RunTx: the
	// first Claim, or the first Finish (a done mark or a failure record),
	// of one Run in eight or so fails, either before the store is reached
	// (nothing written: an error of a moment, a connection killed) or
	// after the store applied it (its answer lost); with Harness.Faults,
	// by breaking the store's own connection (and the commit of RunTx's
	// transaction too, right after fn: killed before it, or its answer
	// lost after it), otherwise by failing the call in Go. Stores with a
	// watermark or without lease expiry (the state file) get none.
	Faults bool
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
// first holds the key (and stalls past its lease). On a store that is an
// [idemstore.Rerunner], re-run requests (idem.Rerun) too: a new request id
// or one sent before, naming one to three periods of any job, at random
// moments and also while a first trigger holds the key; the model
// predicts each outcome (queued, after the running attempt, due already,
// seen before; a period that never ran, was pruned, is parked or unknown
// refuses the whole request, which changes nothing), the records'
// revisions, the done mark that makes a waiting request's revision (also
// when its answer is lost), RerunsDue, and CatchUp running the re-runs
// behind the job's cursor first; each mode's promise below holds per
// revision (a TwoPhase check asks for the running revision). Not covered:
// an operator's Resolve done of a period whose request waits for its
// attempt (the stores differ). Jobs run in each mode
// (AtLeastOnce, AtMostOnce, TwoPhase, and RunTx when h.Tx is set), each
// with its promise checked: AtLeastOnce's done key had its effect,
// AtMostOnce's never twice, TwoPhase's done key exactly once, RunTx's
// business write committed exactly once.
//
// With o.Faults, store faults too (on a store with lease expiry and no
// watermark): the first Claim, or the first Finish (a done mark or a
// failure record), of a Run fails, either before it reaches the store
// (nothing written: an error of a moment, a connection killed) or after
// the store applied it (its answer lost); with h.Faults the store's own
// connection breaks (the server kills it, the reply to an applied commit is
// lost), and the commit of RunTx's transaction right after fn breaks too.
// What each must lead to: a failed claim fails the Run, and an attempt the
// lost answer hid is taken over once its lease ends, its mode settling the
// doubt; a failed Finish is tried again after a short wait (the fake clock
// moves through it) and lands, or finds that its first try did; RunTx's
// commit killed is a failure that left nothing, RunTx's lost answer of an
// applied commit is found done (Ran; a key's first transaction:
// AlreadyDone). Every promise above holds through them: AtLeastOnce's done
// key had its effect, AtMostOnce's never twice, TwoPhase's and RunTx's
// exactly once. A killed connection that the store replaced before it wrote
// (database/sql does) did not strike, and with h.Faults a lost answer may
// be that of a write that changed nothing (a claim's INSERT that found the
// record): the model runs each branch a fault allows (struck or not;
// applied or not) and goes on with the one the store's records show.
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
			effects: map[idem.Key]int{}, effRev: map[idem.Key]map[int64]int{}, seen: map[idem.Key]int64{}}
		var g *gen
		if given == nil {
			g = &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), m: m, cfg: cfg, cu: cs != nil,
				faults: o.Faults && !h.Watermark && h.LeaseExpiry, txFaults: h.Faults != nil}
			_, g.rerun = s.(idemstore.Rerunner)
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
			// A store fault may not strike (a killed connection the
			// store replaced before it wrote), and with Harness.Faults
			// the answer lost may be that of a write that changed
			// nothing: the model runs each branch the fault allows, and
			// goes on with the one the store took.
			var plain, before *branch
			if op.fault.method != "" {
				plain = m.branch(op, mFault{}, "the store fault did not strike: the call reached the store and was answered; the model expects what the call does without it")
				if op.fault.after && h.Faults != nil {
					before = m.branch(op, mFault{method: op.fault.method}, "")
				}
			}
			want := m.apply(op)
			pick := func(got rStep) ([]*branch, []string) {
				main := &branch{m: m, want: want}
				if plain == nil {
					return []*branch{main}, nil
				}
				var cands []*branch
				switch {
				case got.a.struck:
					for _, b := range []*branch{main, before} {
						if b != nil && b.want.struck {
							cands = append(cands, b)
						}
					}
				case want.struck:
					cands = []*branch{plain}
				default:
					cands = []*branch{main}
				}
				switch {
				case len(cands) == 0:
					return []*branch{main}, []string{"store fault: it struck where the model says it cannot"}
				case !got.a.struck && want.struck && h.Faults == nil:
					// Failed in Go, the fault strikes where the model
					// says; a killed connection may be replaced.
					return cands, []string{"store fault: the model says it strikes; it did not"}
				}
				return cands, nil
			}
			got, chosen, diffs, stuck := w.step(ctx, op, o.StepTimeout, pick)
			if stuck != "" {
				out.fatal = fmt.Sprintf("step %d (%s) is stuck:\n%s", i+1, op, stuck)
				return
			}
			chosen.want.count(op, out.tally)
			if chosen.m != m {
				*m = *chosen.m
			}
			_ = got
			if len(diffs) > 0 && chosen.note != "" {
				diffs = append(diffs, "("+chosen.note+")")
			}
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

// branch is one way an operation may go: the model after it, and what it
// expects of the store; note is said with a mismatch against it.
type branch struct {
	m    *model
	want mStep
	note string
}

// branch runs op with fault f instead of its own on a copy of m.
func (m *model) branch(op mOp, f mFault, note string) *branch {
	c := m.clone()
	op.fault = f
	return &branch{m: c, want: c.apply(op), note: note}
}

// step runs op on the store under a deadline, and compares it with the
// branches pick gives for what the store answered: the first one that
// agrees, or else the first one, is chosen, with its differences.
func (w *world) step(ctx context.Context, op mOp, timeout time.Duration, pick func(rStep) ([]*branch, []string)) (rStep, *branch, []string, string) {
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
		return got, nil, nil, fmt.Sprintf("no end after %s; goroutines:\n%s", timeout, dump)
	}
	branches, d := pick(got)
	cctx, ccancel := context.WithTimeout(ctx, timeout)
	defer ccancel()
	w.steps++
	w.mu.Lock()
	d = append(d, w.stuck...)
	w.stuck = nil
	w.mu.Unlock()
	var first []string
	for i, b := range branches {
		bd := w.compare(cctx, b.m, op, b.want, got)
		if len(bd) == 0 {
			return got, b, d, ""
		}
		if i == 0 {
			first = bd
		}
	}
	return got, branches[0], append(d, first...), ""
}
