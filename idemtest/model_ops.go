package idemtest

// The operations of TestModel (mOp: a trigger, a catch-up, a resolve, a
// prune, a move of the clock, an overlap), how they print, and gen, which
// draws them at random from the model's state.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

type opKind int

const (
	opRun     opKind = iota // trigger Run (RunTx for the tx job)
	opCatchUp               // CatchUp of a catch-up job
	opResolve               // Resolve by an operator
	opPrune                 // Prune
	opClock                 // the clock jumps
	opOverlap               // a trigger while another holds the key
	opRerun                 // a re-run request (idem.Rerun)
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
	fault    mFault        // run: a store call of the trigger fails (then no crash)
	req      mRerun        // rerun; overlap: a re-run request while A holds the key (id "": none)
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
		return fmt.Sprintf("Run %s fn=%s%s%s%s", op.key, op.fn, op.crash, op.fault, hf)
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
		rr := ""
		if op.req.id != "" {
			rr = "; " + op.req.String()
		}
		return fmt.Sprintf("Overlap: A triggers %s and holds it in fn%s%s; B: Run %s fn=%s%s; A resumes (%s)%s",
			op.key, stall, rr, op.keyB, op.fn, op.crash, a, hf)
	case opRerun:
		return op.req.String()
	}
	return "?"
}

// gen draws operations, looking at the model's state to pick keys that
// matter (a pending period, a key to resolve).
type gen struct {
	r   *rand.Rand
	m   *model
	cfg *modelConfig
	cu  bool // the store is a CatchUpStore
	// faults: store faults (ModelOptions.Faults); txFaults: RunTx's too
	// (Harness.Faults)
	faults, txFaults bool
	// rerun: the store is an idemstore.Rerunner; sent: the requests sent
	// so far (to send one again); nextID: the last request id's number
	rerun  bool
	sent   []mRerun
	nextID int
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
		if g.r.IntN(10) < 3 && g.m.pending[op.key] == 0 {
			// Not a key with a re-run request waiting for its attempt's
			// done mark: whether an operator's done mark makes the
			// revision is not decided (the SQLite ledger's does; the
			// other ledgers' do not, or only from running).
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
	case x < 58 && g.rerun:
		op.kind = opRerun
		op.req = g.rerunReq()
	case x < 64:
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
		if g.rerun && g.r.IntN(3) == 0 && !g.m.stalePending(op.key) {
			// A re-run of the key A holds (and at times of more).
			op.req = g.rerunReq()
			if !slices.Contains(op.req.keys, op.key) {
				op.req.keys = append(op.req.keys, op.key)
			}
		}
		op.crash = g.crash(10)
		op.hasFails = g.r.IntN(20) == 0
	default:
		op.kind = opRun
		job := g.pick(g.cfg.jobs)
		op.key = g.key(job)
		op.fn = g.fn(g.cfg.modes[job] == modeTx, true)
		op.crash = g.crash(15)
		op.hasFails = g.r.IntN(20) == 0
		g.fault(&op)
	}
	return op
}

// fault gives a Run a store fault, at times: its claim or its first
// Finish fails (RunTx: its commit), before the store or after it applied
// the call. A faulted Run crashes nowhere, and its fn does not stall past
// the lease (the engine retries a failed Finish only within the lease).
func (g *gen) fault(op *mOp) {
	if !g.faults || g.r.IntN(100) >= 12 {
		return
	}
	f := mFault{after: g.r.IntN(2) == 0}
	if g.cfg.modes[op.key.Job] == modeTx {
		if !g.txFaults {
			return
		}
		f.method = faultCommit
		op.fn = mFn{kind: fnOK}
	} else {
		f.method = []string{faultClaim, faultFinish}[g.r.IntN(2)]
		if op.fn.kind == fnStall {
			op.fn = mFn{kind: fnOK}
		}
	}
	op.fault, op.crash = f, mCrash{}
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
