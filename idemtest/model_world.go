package idemtest

// The store's side of TestModel (world): the store, the clock and the
// effects fn applied, and how an operation runs on them (exec, trigger,
// overlap).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

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
	effRev  map[idem.Key]map[int64]int // effects by the revision fn ran for (Info.Revision)
	stuck   []string                   // waits that gave up

	seen  map[idem.Key]int64 // the highest attempt number seen per key
	steps int                // operations run so far
}

// effect applies fn's effect for k, in the revision ctx's Info names.
func (w *world) effect(ctx context.Context, k idem.Key) {
	info, _ := idem.InfoFrom(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.effects[k]++
	if w.effRev[k] == nil {
		w.effRev[k] = map[int64]int{}
	}
	w.effRev[k][info.Revision]++
}

// countRev is how many effects revision rev of k had.
func (w *world) countRev(k idem.Key, rev int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.effRev[k][rev]
}

func (w *world) gaveUp(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stuck = append(w.stuck, msg)
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

// rResult is how a real call ended.
type rResult struct {
	outcome  idem.Outcome
	err      error
	crashed  bool
	panicked bool
	bad      string // a panic that is not fn's
	struck   bool   // the operation's store fault struck
}

func (w *world) trigger(ctx context.Context, k idem.Key, fn func(context.Context) error, crash mCrash) (r rResult) {
	return w.triggerFault(ctx, k, fn, crash, mFault{})
}

// triggerFault is trigger with a store fault (f.method "": none); r.struck
// reports whether it struck.
func (w *world) triggerFault(ctx context.Context, k idem.Key, fn func(context.Context) error, crash mCrash, f mFault) (r rResult) {
	var res idem.Result
	s := w.s
	var fs *faultStore
	var cf *commitFault
	if f.method != "" {
		// The engine's retry of the failed call waits on the Runs'
		// clock: the clock moves through that wait.
		w.clk.setAuto(func(d time.Duration) { w.move(d, true) })
		defer w.clk.setAuto(nil)
	}
	switch f.method {
	case faultClaim, faultFinish:
		fs = &faultStore{Store: w.s, w: w, key: k, f: f}
		s = fs
	case faultCommit:
		cf = &commitFault{w: w, key: k, f: f}
	}
	func() {
		defer catch(&r)
		mode := w.cfg.modes[k.Job]
		ctx := crashCtx(ctx, crash)
		if cf != nil {
			ctx = cf.ctx(ctx)
		}
		if mode == modeTx {
			r.err = w.h.Tx.Run(ctx, w.s, k, fn, optsOf[idem.Option](w.base(), idem.OneAttempt(), idem.ReportTo(&res))...)
			return
		}
		r.err = idem.RunOn(ctx, s, k, fn, optsOf[idem.Option](w.base(), w.mode(mode), idem.OneAttempt(), idem.ReportTo(&res))...)
	}()
	r.outcome, r.crashed = res.Outcome, errors.Is(r.err, ErrCrashed)
	switch {
	case fs != nil:
		r.struck = fs.didStrike()
	case cf != nil:
		r.struck = cf.end()
	}
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
	rr      []idemstore.RerunOutcome
	rrErr   error
	aInFn   bool // overlap: the first trigger reached fn
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
		st.a = w.triggerFault(ctx, op.key, w.fn(queue([]mFn{op.fn}), w.cfg.modes[op.key.Job] == modeTx), op.crash, op.fault)
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
		st.a, st.b, st.aInFn, st.rr, st.rrErr = w.overlap(ctx, op)
	case opRerun:
		st.rr, st.rrErr = w.rerunReal(ctx, op.req)
	}
	return st
}

// overlap: A triggers op.key and holds it inside fn; the clock moves op.d
// without A's heartbeat running; B triggers op.keyB; A resumes.
// With op.req, the re-run request is sent once A holds the key (or ended).
func (w *world) overlap(ctx context.Context, op mOp) (a, b rResult, inFn bool, rr []idemstore.RerunOutcome, rrErr error) {
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
			w.effect(ctx, op.key)
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
	if op.req.id != "" {
		rr, rrErr = w.rerunReal(ctx, op.req)
	}
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
	return a, b, inFn, rr, rrErr
}
