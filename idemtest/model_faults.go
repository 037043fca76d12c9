package idemtest

// The faults TestModel injects on the store's side: what a call of fn
// does (succeeds, fails, panics, stalls past its lease, runs long), a crash
// at a protocol point (crashCtx), fn's panic recovered (catch), a
// TwoPhase check that errs (has), and a store call that fails (faultStore,
// commitFault).

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

var errModelFn = errors.New("idemtest: model: fn failed")

// modelPanic is what a panicking fn panics with.
type modelPanic struct{ key idem.Key }

var errCheckFails = errors.New("idemtest: model: the downstream check fails")

// has is TwoPhase's check: whether the revision of k that is running (the
// record's: its attempt holds it) had its effect. A re-run asks for its
// own revision's, as a downstream asked for Info.RequestID answers.
func (w *world) has(ctx context.Context, k idem.Key) (bool, error) {
	if w.hasFails.Load() {
		return false, errCheckFails
	}
	rec, _, err := w.s.Lookup(ctx, k)
	if err != nil {
		return false, err
	}
	return w.countRev(k, rec.Revision) > 0, nil
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
		w.effect(ctx, k)
		return nil
	case fnFail:
		return errModelFn
	case fnFailAfter:
		if !tx {
			w.effect(ctx, k)
		}
		return errModelFn
	case fnNothing:
		return idem.NothingHappened(errModelFn)
	case fnPermanent:
		return idem.Permanent(errModelFn)
	case fnPanic:
		if !tx {
			w.effect(ctx, k)
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
		w.effect(ctx, k)
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

// errModelStore is the error of a store call that TestModel fails itself
// (no Harness.Faults).
var errModelStore = errors.New("idemtest: model: the store call failed (injected)")

// faultStore is the store of a Run with a store fault: the first call of
// f.method for key fails, as the connection breaks (Harness.Faults) or,
// without one, by an error returned before the store is called or after it
// applied the call.
type faultStore struct {
	idemstore.Store
	w   *world
	key idem.Key
	f   mFault

	mu     sync.Mutex
	used   bool
	struck bool
}

// DefaultOptions are the store's, which the engine takes as the calls'
// defaults.
func (s *faultStore) DefaultOptions() []idem.Option {
	if d, ok := s.Store.(interface{ DefaultOptions() []idem.Option }); ok {
		return d.DefaultOptions()
	}
	return nil
}

// take reports whether this call of method for key is the one to fail.
func (s *faultStore) take(method string, key idem.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used || method != s.f.method || key != s.key {
		return false
	}
	s.used = true
	return true
}

func (s *faultStore) hit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.struck = true
}

func (s *faultStore) didStrike() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.struck
}

// call runs do, the store's call, with the fault.
func (s *faultStore) call(do func() error) error {
	if fh := s.w.h.Faults; fh != nil {
		kind := FaultKill
		if s.f.after {
			kind = FaultLoseReply
		}
		disarm := fh.Arm(s.w.t, s.Store, kind)
		err := do()
		if disarm() && err != nil {
			s.hit()
		}
		return err
	}
	if !s.f.after {
		s.hit()
		return fmt.Errorf("%s %s: %w", s.f.method, s.key, errModelStore)
	}
	if err := do(); err != nil {
		return err // refused: no answer to lose
	}
	s.hit()
	return fmt.Errorf("%s %s (applied, its answer lost): %w", s.f.method, s.key, errModelStore)
}

func (s *faultStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	if !s.take(faultClaim, req.Key) {
		return s.Store.Claim(ctx, req)
	}
	var c idemstore.Claim
	err := s.call(func() (err error) {
		c, err = s.Store.Claim(ctx, req)
		return err
	})
	if err != nil {
		return idemstore.Claim{}, err
	}
	return c, nil
}

func (s *faultStore) Finish(ctx context.Context, key idem.Key, attempt int64, end idemstore.End) error {
	if !s.take(faultFinish, key) {
		return s.Store.Finish(ctx, key, attempt, end)
	}
	return s.call(func() error { return s.Store.Finish(ctx, key, attempt, end) })
}

// commitFault breaks the commit of RunTx's transaction through
// Harness.Faults: armed when fn has returned (the point AfterFn, inside the
// transaction), on the goroutine that commits.
type commitFault struct {
	w      *world
	key    idem.Key
	f      mFault
	disarm func() bool
}

func (c *commitFault) ctx(ctx context.Context) context.Context {
	return idemstore.WithTrace(ctx, &idemstore.Trace{Checkpoint: func(_ context.Context, p idemstore.Point, k idem.Key) error {
		if p == idemstore.AfterFn && k == c.key && c.disarm == nil {
			kind := FaultKill
			if c.f.after {
				kind = FaultLoseReply
			}
			c.disarm = c.w.h.Faults.Arm(c.w.t, c.w.s, kind)
		}
		return nil
	}})
}

// end disarms the fault and reports whether it struck.
func (c *commitFault) end() bool { return c.disarm != nil && c.disarm() }
