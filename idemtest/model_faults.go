package idemtest

// The faults TestModel injects on the store's side: what a call of fn
// does (succeeds, fails, panics, stalls past its lease, runs long), a crash
// at a protocol point (crashCtx), fn's panic recovered (catch), and a
// TwoPhase check that errs (has).

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

var errModelFn = errors.New("idemtest: model: fn failed")

// modelPanic is what a panicking fn panics with.
type modelPanic struct{ key idem.Key }

var errCheckFails = errors.New("idemtest: model: the downstream check fails")

func (w *world) has(_ context.Context, k idem.Key) (bool, error) {
	if w.hasFails.Load() {
		return false, errCheckFails
	}
	return w.count(k) > 0, nil
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
