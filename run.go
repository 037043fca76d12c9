package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/capture"
	"github.com/idemgo/idem/internal/runctx"
)

// RunOn runs fn for key on store s, at most once at a time, until the key
// is done: the protocol behind [Run] and (*Ledger).Run, for any [Store].
//
//  1. Claim: a key that is done returns nil at once (AlreadyDone) without
//     writing. A key held by a live lease returns ErrInProgress (or waits,
//     with [WaitForTurn]). Otherwise the claim takes a new attempt number,
//     higher than any before: the fencing token.
//  2. fn runs with a context that carries the key, attempt and request id
//     ([InfoFrom]); a heartbeat renews the lease every third of it. If the
//     renewal finds a newer attempt, fn's context is cancelled with cause
//     ErrLeaseLost.
//  3. Done: the done mark is written only if the attempt still holds the key,
//     and durably. Otherwise Run returns ErrLeaseLost, never success. A
//     store error on the way (a dropped connection) is retried a few times
//     within the attempt's lease; so is every other record of how an attempt
//     ended.
//  4. An attempt that died (lease expired, or its process found gone by
//     [idemstore.HolderGone]; not done), or an fn that failed, is recovered by the
//     mode: [AtLeastOnce] (default), [AtMostOnce] or [TwoPhase]. An fn that
//     fails with CheckLease's error after a stall that no other attempt used
//     to take over is such a failure too: it may have had its effect.
//     Failures are retried in-process after the [Backoff]'s delay, as long
//     as the retry starts within [RetryWithin] of the call's start; the
//     failure count and the time of the next allowed attempt are kept in the
//     store, so a separate process, or the next trigger, honours them too.
//     When the backoff gives up, or fn returns a [Permanent] error, the key
//     is parked (ErrParked) until Reset.
//
// Run returns nil when the key's work is done, now or earlier; [ReportTo]
// tells which. Otherwise the error is an *[Error] matching one of
// ErrInProgress, ErrUnknownOutcome, ErrBackingOff, ErrParked, ErrLeaseLost,
// and wrapping fn's own error.
//
// A panic in fn propagates to the caller; Run does not recover it. The
// heartbeat stops, and the claim stays as it is until its lease expires;
// then the next Run treats the attempt as one that died, by its mode.
// Whenever an attempt ends without its end recorded (a panic, a store that
// kept failing, a lost lease), Run releases what this process holds for it
// (a state file's lock), as the kernel would if the process died.
func RunOn(ctx context.Context, s Store, key Key, fn func(context.Context) error, opts ...Option) error {
	if fn == nil {
		panic("idem: Run with a nil fn")
	}
	st, cfg := storeFor(s, callRun, opts)
	return execute(ctx, st, key, cfg, noValue(fn), nil, nil)
}

// valueFunc is fn as the engine runs it: it returns the value to store with
// the done mark, already encoded (nil for none).
type valueFunc func(context.Context) ([]byte, error)

// noValue is fn that stores no value; unless the caller's context carries
// a capture slot (the idem command's --capture), whose bytes fn sets.
func noValue(fn func(context.Context) error) valueFunc {
	return func(ctx context.Context) ([]byte, error) {
		slot := capture.From(ctx)
		if slot == nil {
			return nil, fn(ctx)
		}
		slot.Take() // nothing from an earlier attempt or period
		err := fn(ctx)
		b := slot.Take()
		if err == nil && len(b) > idemstore.MaxValue {
			return nil, Permanent(fmt.Errorf("%w: %d bytes, more than idemstore.MaxValue (%d); nothing was marked done",
				ErrValueTooLarge, len(b), idemstore.MaxValue))
		}
		return b, err
	}
}

// RunTx is RunOn for a [TxStore]: fn gets the store's
// transaction, and its writes commit together with the done mark, or not at
// all.
//
// For writes in the store's database this gives an exactly-once effect, so
// RunTx needs no mode: a failed or killed attempt left nothing behind and
// is simply run again (it takes no mode option, and ignores a store's
// default mode). The claim is a lease as in RunOn, but no heartbeat runs
// while fn does: the transaction's lock keeps other attempts out until it
// ends.
//
// A transaction whose commit the store applied but whose answer was lost
// (the connection broke) is found done when RunTx reads the key's record
// after the error: the call returns nil (outcome Ran). For a key's first
// transaction the claim that follows finds the key done (AlreadyDone).
func RunTx[Tx any](ctx context.Context, s TxStore[Tx], key Key, fn func(context.Context, Tx) error, opts ...Option) error {
	if fn == nil {
		panic("idem: RunTx with a nil fn")
	}
	st, cfg := txStoreFor[Tx](s, callRunTx, opts)
	return runTx(ctx, st, key, noTxValue(fn), cfg)
}

// noTxValue is a RunTx fn that stores no value.
func noTxValue[Tx any](fn func(context.Context, Tx) error) func(context.Context, Tx) ([]byte, error) {
	return func(ctx context.Context, tx Tx) ([]byte, error) { return nil, fn(ctx, tx) }
}

// runTx is RunTx with its config.
func runTx[Tx any](ctx context.Context, s idemstore.TxStore[Tx], key Key, fn func(context.Context, Tx) ([]byte, error), cfg *config) error {
	cfg.mode = atLeastOnce
	// body is fn as the store calls it. Whether fn failed is kept here, in
	// *failed (reset at each call: a store may run the transaction again),
	// not recognised in the store's answer, which may wrap fn's error or
	// replace it.
	body := func(ctx context.Context, failed **fnError, stored *[]byte) func(Tx) ([]byte, error) {
		return func(tx Tx) ([]byte, error) {
			*failed, *stored = nil, nil
			if err := useLimits(ctx); err != nil {
				*failed = &fnError{NothingHappened(err)}
				return nil, *failed
			}
			v, err := fn(withOutbox(ctx, s, tx, key, "", cfg.clock), tx)
			if err != nil {
				*failed = &fnError{err}
				return nil, *failed
			}
			*stored = v
			return v, nil
		}
	}
	var fresh freshBody
	if fs, ok := s.(idemstore.FreshTxStore[Tx]); ok {
		fresh = func(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, bool, []byte, *fnError, error) {
			var failed *fnError
			var stored []byte
			// The attempt's span starts when the store runs fn: a key
			// with a record runs none here.
			endSpan := func(idemstore.SpanEnd) {}
			ran := false
			c, done, err := fs.ClaimFinishTx(ctx, req, cfg.cursor, func(tx Tx) ([]byte, error) {
				ran = true
				endSpan(idemstore.SpanEnd{Err: errTxAgain}) // the store runs the transaction again
				var sctx context.Context
				sctx, endSpan = startAttemptSpan(ctx, key, 1, 0, 0, false)
				return body(sctx, &failed, &stored)(tx)
			})
			switch {
			case failed != nil:
				endSpan(idemstore.SpanEnd{Err: failed.err})
			default:
				endSpan(idemstore.SpanEnd{Err: err})
			}
			if failed != nil && err == error(failed) {
				// fn's error as is: the claim alone was committed.
				return c, false, nil, failed, nil
			}
			if ran && !done && !idemstore.IsStop(err) {
				// fn ran as attempt 1 and its transaction did not commit.
				return c, false, nil, nil, &uncommitted{err}
			}
			return c, done, stored, nil, err
		}
	}
	return execute(ctx, s, key, cfg, nil, func(ctx context.Context, attempt int64, now time.Time) ([]byte, error) {
		var failed *fnError
		var stored []byte
		err := s.FinishTx(ctx, key, attempt, now, cfg.cursor, body(ctx, &failed, &stored))
		if err != nil && failed != nil {
			return nil, failed // fn failed: its writes rolled back with the done mark
		}
		return stored, err
	}, fresh)
}

// txBody runs fn and marks the attempt done in one transaction, with the
// value it returns, the value stored. An error that is an *fnError is fn's
// own.
type txBody func(ctx context.Context, attempt int64, now time.Time) (stored []byte, err error)

// freshBody claims the key, and if it has no record, runs fn and marks the
// key done in the same transaction (FreshTxStore.ClaimFinishTx), with the
// value stored. fnErr is set when fn failed and the claim of attempt 1
// alone was committed; err, when nothing was committed. A body that
// neither marked the key done nor claimed it returns a zero Claim (Each's
// period mark, FreshMarker.MarkFresh): the key is claimed the usual way.
type freshBody func(ctx context.Context, req idemstore.ClaimRequest) (c idemstore.Claim, done bool, stored []byte, fnErr *fnError, err error)

// uncommitted is the answer of a one-transaction claim whose fn ran, as
// attempt 1, and whose transaction did not commit (err, nil when the store
// committed the claim alone: idemstore.ClaimFirst). That run counts as a
// failed attempt 1, so that fn never runs twice as one attempt.
type uncommitted struct{ err error }

func (e *uncommitted) Error() string {
	if e.err == nil {
		return "the transaction did not commit"
	}
	return "the transaction did not commit: " + e.err.Error()
}

func (e *uncommitted) Unwrap() error { return e.err }

// fnError marks an error as fn's own, for the engine's loop. Stores never
// see it as such: see RunTx.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }
func (e *fnError) Unwrap() error { return e.err }

// leaseState is what this process knows of an attempt's lease.
type leaseState struct {
	clock Clock
	until atomic.Int64 // unix nanoseconds: the lease's end as of the last claim or renewal
}

func newLeaseState(c Clock, until time.Time) *leaseState {
	l := &leaseState{clock: c}
	l.until.Store(until.UnixNano())
	return l
}

type leaseKey struct{}

// CheckLease reports whether fn's attempt still holds its key, as far as
// this process can tell without asking the store: it returns an error
// matching ErrLeaseLost if a renewal found a newer attempt, or if the lease
// has run out by this process's clock (the process stalled past it: a long
// GC pause, a frozen VM, a starved CPU). Call it right before an effect
// that cannot be undone, and when it refuses before fn caused any effect,
// return it wrapped in [NothingHappened]: the attempt then counts as a
// plain failure that is retried, rather than one that may have had its
// effect (unknown in AtMostOnce, a downstream check in TwoPhase). Returned
// as is, it is such a doubtful failure, unless a newer attempt took the key
// over (then Run returns ErrLeaseLost).
//
// It narrows, but cannot close, the window in which a holder that stalled
// past its lease acts after another took over: the stall can happen
// between the check and the effect. Two things close it: a lease much
// longer than any pause, and a downstream that rejects stale fencing tokens
// (Info.Attempt). Outside a Run (or in RunTx, whose transaction keeps others
// out) it returns nil.
func CheckLease(ctx context.Context) error {
	if err := context.Cause(ctx); errors.Is(err, ErrLeaseLost) {
		return err
	}
	l, ok := ctx.Value(leaseKey{}).(*leaseState)
	if !ok {
		return nil
	}
	if until := time.Unix(0, l.until.Load()); !l.clock.Now().Before(until) {
		info, _ := InfoFrom(ctx)
		return &stallError{key: info.Key, attempt: info.Attempt, until: until}
	}
	return nil
}

// stallError is CheckLease's answer when the lease ran out by this
// process's clock: the process stalled past it. Another attempt may or may
// not have taken the key over yet.
type stallError struct {
	key     Key
	attempt int64
	until   time.Time
}

func (e *stallError) detail() string {
	return "its lease ran out at " + e.until.UTC().Format(time.RFC3339Nano) + " without a renewal (the process stalled)"
}

func (e *stallError) Error() string {
	return fmt.Sprintf("%v: attempt %d of %s: %s", ErrLeaseLost, e.attempt, e.key, e.detail())
}

func (e *stallError) Unwrap() error { return ErrLeaseLost }

// stalledFailure is the failure of an attempt whose fn returned
// CheckLease's error after a stall that no renewal found taken over. It is
// recorded as the attempt's error without repeating the key, and it does
// not match ErrLeaseLost: the run ends by its mode, unless the fenced
// record of its end is refused.
type stalledFailure struct{ st *stallError }

func (e *stalledFailure) Error() string { return "lease lost: " + e.st.detail() }

// takeoverError is the cause with which the heartbeat cancels fn's context
// when a renewal found a newer attempt.
type takeoverError struct {
	key     Key
	attempt int64
	err     error // the store's answer to the renewal
}

func (e *takeoverError) Error() string {
	return fmt.Sprintf("%v: attempt %d of %s was taken over by a newer attempt", ErrLeaseLost, e.attempt, e.key)
}

func (e *takeoverError) Unwrap() []error { return []error{ErrLeaseLost, e.err} }

// detailError is the Err of an *Error whose outcome already names what
// happened: its text is the detail alone (no repeated "idem: lease lost"),
// and it wraps the errors behind it.
type detailError struct {
	msg  string
	errs []error
}

func (e *detailError) Error() string   { return e.msg }
func (e *detailError) Unwrap() []error { return e.errs }

func details(msg string, errs ...error) *detailError {
	d := &detailError{msg: msg}
	for _, err := range errs {
		if err != nil {
			d.errs = append(d.errs, err)
		}
	}
	return d
}

// Info describes the attempt a fn is running for. Get it with [InfoFrom].
//
// Attempt is the fencing token, higher for every new attempt. In RunTx, a
// transaction that did not commit after fn ran (its COMMIT failed) counts
// as a failed attempt, a key's first transaction too (whose claim commits
// with it): fn runs again as the next attempt. A store may run a
// transaction again itself before it answers (idemstore.TxStore), fn with
// it, under the same Attempt: only one of those runs can commit.
type Info struct {
	Key       Key
	Item      string // Each: the item being applied; "" for Run
	Attempt   int64  // the attempt number: the fencing token, higher for every new attempt (see above)
	RequestID string // Key.RevisionRequestID(Revision); in Each Key.ItemRequestID(Item), a format of its own: the same for every attempt
	Owner     string // who holds the attempt
	// Revision is the period's revision: 0 for its first run, n for the
	// n-th re-run requested after it was done (Rerun). A re-run's
	// RequestID is the revision's, so a downstream that dedupes by it
	// sees the re-run as new work.
	Revision int64
}

type infoKey struct{}

// InfoFrom returns the attempt that fn's context belongs to.
func InfoFrom(ctx context.Context) (Info, bool) {
	i, ok := ctx.Value(infoKey{}).(Info)
	return i, ok
}

// execute runs the protocol. Exactly one of fn and tx is set.
func execute(ctx context.Context, s idemstore.Store, key Key, cfg *config, fn valueFunc, tx txBody, fresh freshBody) (err error) {
	r := runner{s: finishAlways{s}, key: key, cfg: cfg, res: Result{Key: key},
		owner: runctx.Owner(ctx), oneAttempt: runctx.OneAttempt(ctx)}
	start := cfg.clock.Now()
	r.start = start
	if !cfg.retryFrom.IsZero() {
		r.start = cfg.retryFrom
	}
	ctx, endSpan := startRunSpan(ctx, s, key, cfg, tx != nil)
	defer func() {
		r.res.Err = err
		r.res.Duration = cfg.clock.Now().Sub(start)
		if r.res.Outcome == 0 {
			r.res.Outcome = Failed
		}
		endRunSpan(endSpan, r.res)
		if cfg.report != nil {
			*cfg.report = r.res
		}
		if cfg.result != nil {
			*cfg.result = r.res
		}
		if cfg.observer != nil {
			cfg.observer(r.res)
		}
	}()
	if cfg.err != nil {
		return cfg.err
	}
	if err := key.Validate(); err != nil {
		return err
	}
	if err := nestedRun(ctx, key); err != nil {
		return r.fail(Failed, err)
	}
	guards, err := bindGuards(cfg.guards, s)
	if err != nil {
		return err
	}
	if d := checkGuards(ctx, guards, cfg.logger, key); d != nil {
		return r.fail(Deferred, d)
	}
	ctx, release, d := holdLimits(ctx, s, key, cfg.limits)
	if d != nil {
		logDeferral(ctx, cfg.logger, key, d)
		return r.fail(Deferred, d)
	}
	if len(cfg.limits) == 0 && ctx.Value(startsKey{}) != nil {
		ctx = context.WithValue(ctx, startsKey{}, (*starts)(nil)) // a run inside fn: not fn's starts
	}
	defer release()
	defer func() {
		// The attempt this call holds ended without its end recorded: a
		// crash point stopped the run, fn panicked, the store kept failing,
		// or the lease was lost. Drop what this process holds for it (a
		// state file's lock), as the kernel would if the process died, so
		// that no lock outlives its attempt.
		if rs, ok := s.(idemstore.Releaser); ok && r.held > 0 {
			rs.Release(key, r.held)
		}
	}()
	return r.loop(ctx, fn, tx, fresh)
}

// nestedRun returns an error matching ErrNestedRun (and Permanent: no retry
// can help) when ctx is the context of a fn that runs for key itself: a
// Run, RunTx or Each of key there would find key held by its own caller.
func nestedRun(ctx context.Context, key Key) error {
	info, ok := InfoFrom(ctx)
	if !ok || info.Item != "" || info.Key != key {
		return nil
	}
	return Permanent(fmt.Errorf("%w: attempt %d of the enclosing run holds %s, so this run would find it held. "+
		"Do not call Run, RunTx or Each for the key inside its own run; to commit business writes with a catch-up period's done mark and cursor, use idem.CatchUpTx",
		ErrNestedRun, info.Attempt, key))
}

// finishAlways passes Finish a context that is not cancelled with the
// caller's: an attempt that ended must be recorded even if the caller gave
// up (SIGTERM, a deadline), or its done mark would be lost.
type finishAlways struct{ idemstore.Store }

func (f finishAlways) Finish(ctx context.Context, key Key, attempt int64, end idemstore.End) error {
	return f.Store.Finish(context.WithoutCancel(ctx), key, attempt, end)
}

type runner struct {
	s         finishAlways // a struct, not an interface: no allocation per call
	key       Key
	cfg       *config
	res       Result
	start     time.Time     // the call's start, by cfg.clock: RetryWithin counts from it
	claimedAt time.Time     // when the current attempt was claimed, by cfg.clock
	leaseEnd  time.Time     // the current attempt's lease end, by cfg.clock, as of its claim or last renewal
	held      int64         // the attempt this call holds and has not recorded the end of; 0 if none
	busyWait  time.Duration // with cfg.pollFirst: the last wait for another holder
	revision  int64         // the claimed period's revision (Info.Revision)

	// owner is who the call's claims name: this process (idemstore.Owner),
	// or, in a run that idemtest's crash kit crashes, an owner of its own
	// (internal/runctx).
	owner string
	// oneAttempt: the call runs under idemtest's crash kit (Crash.Crash,
	// Crash.Recover), where it makes one attempt unless RetryWithin is
	// given (internal/runctx).
	oneAttempt bool
	// lostRun: RunTx's one-transaction claim ran fn as attempt 1 and
	// committed nothing; the claim that follows, if of attempt 1, records
	// that run as its failure.
	lostRun *uncommitted
}

// log logs msg with the call's context ctx, if the call has a logger.
func (r *runner) log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if r.cfg.logger == nil {
		return
	}
	attrs = append(attrs, slog.String("job", r.key.Job), slog.String("period", r.key.Period))
	if r.res.Attempt > 0 {
		attrs = append(attrs, slog.Int64("attempt", r.res.Attempt))
	}
	r.cfg.logger.LogAttrs(ctx, level, "idem: "+msg, attrs...)
}

// fail ends the run with an *Error of outcome o.
func (r *runner) fail(o Outcome, err error) error {
	r.res.Outcome = o
	return &Error{Key: r.key, Outcome: o, Attempt: r.res.Attempt, Err: err}
}

// lost ends the run with ErrLeaseLost: a newer attempt holds the key. msg
// says how that was found; errs are the errors behind it.
func (r *runner) lost(ctx context.Context, msg string, errs ...error) error {
	err := r.fail(LeaseLost, details(msg, errs...))
	r.log(ctx, slog.LevelWarn, "lease lost: "+msg)
	return err
}

// acquired notes that the call holds attempt, claimed at r.claimedAt.
func (r *runner) acquired(attempt int64) {
	r.held = attempt
	r.leaseEnd = r.claimedAt.Add(r.cfg.lease)
}

// loop runs the protocol's steps until the call ends: claim the key,
// settle a doubt that an earlier attempt left, attempt fn, record the
// attempt's failure, and back off before claiming again.
func (r *runner) loop(ctx context.Context, fn valueFunc, tx txBody, fresh freshBody) error {
	for {
		c, runErr, end, err := r.claim(ctx, tx, &fresh)
		if end {
			return err
		}
		if runErr == nil { // fn has not run in the one-transaction claim
			if c.Doubt {
				// An earlier attempt may have had its effect.
				if settled, err := r.settleDoubt(ctx, c.Attempt, c.Record.Failures, errors.New(c.Record.LastError)); settled || err != nil {
					return err
				}
			}
			r.revision = c.Record.Revision
			if runErr = r.attempt(ctx, c.Attempt, c.Record.Attempt, c.Doubt, fn, tx); runErr == nil {
				r.res.Outcome = Ran
				r.log(ctx, slog.LevelInfo, "done")
				return nil
			}
		}
		rec, cause, end, err := r.recordFailure(ctx, c, runErr, tx != nil)
		if end {
			return err
		}
		if err := r.backOff(ctx, c.Attempt, rec, cause); err != nil {
			return err
		}
	}
}

// claim is the claim step. It returns the claim of an attempt that this
// call now holds; or, with fnErr set, that of the attempt that the
// one-transaction claim of RunTx (fresh, tried once) ran and whose fn
// failed; or end = true with the call's result: the key is settled,
// held, backing off, unknown or parked (with WaitForTurn, claim waits for a
// holder or a backoff and claims again), or the claim failed.
func (r *runner) claim(ctx context.Context, tx txBody, fresh *freshBody) (c idemstore.Claim, fnErr error, end bool, err error) {
	cfg := r.cfg
	for {
		if err := idemstore.Checkpoint(ctx, idemstore.BeforeClaim, r.key); err != nil {
			return c, nil, true, err
		}
		r.claimedAt = cfg.clock.Now()
		req := idemstore.ClaimRequest{
			Key:         r.key,
			Owner:       r.owner,
			Now:         r.claimedAt,
			Lease:       cfg.lease,
			Durable:     tx == nil && cfg.mode.durableClaim(),
			TakeUnknown: cfg.mode.takeUnknown(),
			Fingerprint: cfg.fingerprint,
		}
		claimed := false
		if f := *fresh; f != nil {
			*fresh = nil // only once: a retry claims the usual way
			if c, claimed, end, fnErr, err = r.claimFresh(ctx, f, req); end || fnErr != nil {
				return c, fnErr, end, err
			}
		}
		if !claimed {
			if c, err = r.s.Claim(ctx, req); err != nil {
				if idemstore.IsStop(err) {
					return c, nil, true, err
				}
				return c, nil, true, r.fail(Failed, fmt.Errorf("claim: %w", err))
			}
		}
		if c.State != idemstore.ClaimAcquired {
			if again, err := r.unacquired(ctx, c); !again {
				return c, nil, true, err
			}
			continue
		}
		r.res.Attempt = c.Attempt
		if !c.Now.IsZero() { // the lease counts from when the store wrote the claim
			r.claimedAt = c.Now
		}
		r.acquired(c.Attempt)
		r.log(ctx, slog.LevelDebug, "claimed", slog.Bool("doubt", c.Doubt))
		if err := idemstore.Checkpoint(ctx, idemstore.AfterClaim, r.key); err != nil {
			return c, nil, true, err
		}
		if lost := r.lostRun; lost != nil {
			r.lostRun = nil
			if c.Attempt == 1 && !c.Doubt { // fn ran as attempt 1 already: that run was this attempt, and failed
				r.res.Attempts++
				return c, lost, false, nil
			}
		}
		return c, nil, false, nil
	}
}

// claimFresh is RunTx's one-transaction claim: a key with no record is
// claimed, run and marked done in one transaction. It returns end = true
// when the key is done now (or a crash point stopped it); fnErr when fn
// failed and the claim of attempt 1 alone was committed; claimed when the
// key had a record, and c is its claim; none of them when nothing was
// committed, and the key is to be claimed the usual way.
func (r *runner) claimFresh(ctx context.Context, f freshBody, req idemstore.ClaimRequest) (c idemstore.Claim, claimed, end bool, fnErr, err error) {
	info := Info{Key: r.key, Attempt: 1, RequestID: r.key.RequestID(), Owner: req.Owner}
	c, done, stored, fe, err := f(context.WithValue(ctx, infoKey{}, info), req)
	un, _ := err.(*uncommitted)
	switch {
	case done:
		r.res.Attempt, r.res.Attempts, r.res.Outcome, r.res.Value = 1, 1, Ran, stored
		r.log(ctx, slog.LevelInfo, "done")
		return c, false, true, nil, idemstore.Checkpoint(ctx, idemstore.AfterDone, r.key)
	case fe != nil:
		// Go on as after any failed attempt.
		r.res.Attempt, r.res.Attempts = 1, 1
		r.acquired(1)
		return c, false, false, fe, nil
	case idemstore.IsStop(err):
		return c, false, true, nil, err
	case un != nil:
		if c.State == idemstore.ClaimAcquired { // the claim alone committed (ClaimFirst): its attempt failed
			r.res.Attempt, r.res.Attempts = c.Attempt, 1
			r.acquired(c.Attempt)
			return c, false, false, un, nil
		}
		r.log(ctx, slog.LevelDebug, "one-transaction claim ran fn and committed nothing; claiming the usual way", slog.Any("error", un.err))
		r.lostRun = un
		return c, false, false, nil, nil
	case err != nil:
		r.log(ctx, slog.LevelDebug, "one-transaction claim failed; claiming the usual way", slog.Any("error", err))
		return c, false, false, nil, nil
	case c.State == 0: // nothing written, nothing read (FreshMarker): the usual way
		return c, false, false, nil, nil
	}
	return c, true, false, nil, nil
}

// unacquired answers a claim that gave this call no attempt: it returns
// the call's result (nil for a key that is done or skipped); or, with
// WaitForTurn, for a key that another holder runs or that backs off, it
// waits and returns again = true to claim again.
func (r *runner) unacquired(ctx context.Context, c idemstore.Claim) (again bool, err error) {
	cfg := r.cfg
	switch c.State {
	case idemstore.ClaimDone:
		r.res.Outcome, r.res.Value = AlreadyDone, c.Record.Value
		return false, nil
	case idemstore.ClaimMismatch:
		r.res.Outcome = ParamsMismatch
		return false, mismatch(r.key, c.Record.Fingerprint, r.cfg.fingerprint)
	case idemstore.ClaimSkipped:
		r.res.Outcome = Skipped
		return false, nil
	case idemstore.ClaimBusy:
		if cfg.wait {
			wait := cfg.poll
			if cfg.pollFirst > 0 {
				r.busyWait = min(max(2*r.busyWait, cfg.pollFirst), cfg.poll)
				wait = r.busyWait
			}
			if err := sleep(ctx, cfg.clock, wait); err != nil {
				return false, r.fail(InProgress, err)
			}
			return true, nil
		}
		r.res.Outcome = InProgress
		return false, &Error{Key: r.key, Outcome: InProgress, Attempt: c.Record.Attempt, Holder: c.Record.Owner,
			LeaseUntil: c.Record.LeaseUntil}
	case idemstore.ClaimBackingOff:
		if cfg.wait {
			// At least the poll interval: NotBefore may be on the store's clock.
			if err := sleep(ctx, cfg.clock, max(cfg.poll, c.Record.NotBefore.Sub(cfg.clock.Now()))); err != nil {
				return false, r.fail(BackingOff, err)
			}
			return true, nil
		}
		r.res.Outcome = BackingOff
		return false, &Error{Key: r.key, Outcome: BackingOff, Attempt: c.Record.Attempt, NotBefore: c.Record.NotBefore,
			Err: lastError(c.Record)}
	case idemstore.ClaimUnknown:
		r.res.Attempt = c.Record.Attempt
		return false, r.fail(Unknown, lastError(c.Record))
	case idemstore.ClaimParked:
		r.res.Attempt = c.Record.Attempt
		return false, r.fail(Parked, lastError(c.Record))
	}
	return false, r.fail(Failed, fmt.Errorf("store answered claim state %d", c.State))
}

// recordFailure is the step after an attempt of claim c failed with
// runErr. It ends the call (end = true) when runErr says the attempt is
// over for good (a crash point's stop, a lost lease), when the failure
// parks the key, or when its mode settles the doubt it leaves; otherwise it
// records the failure with the time of the next allowed attempt (rec) and
// returns cause, the failure as recorded.
func (r *runner) recordFailure(ctx context.Context, c idemstore.Claim, runErr error, isTx bool) (rec idemstore.End, cause error, end bool, err error) {
	if idemstore.IsStop(runErr) {
		return rec, nil, true, runErr
	}
	if e, ok := runErr.(*Error); ok && e.Outcome == LeaseLost {
		return rec, nil, true, e // a renewal or the fenced done mark found a newer attempt
	}
	if isTx && idemstore.IsFatal(runErr) {
		// The store's commit failed on the disk and it refuses every
		// write now: the transaction, fn's writes and the done mark
		// together, is on disk whole or not at all, which a Run on a
		// handle opened anew finds out. Not "nothing happened".
		return rec, nil, true, r.fail(Failed, runErr)
	}
	cause = runErr
	var fe *fnError
	switch {
	case errors.As(runErr, &fe):
		cause = fe.err
		if st, ok := cause.(*stallError); ok {
			// fn returned CheckLease's error: the process stalled past
			// the lease, but no renewal found a newer attempt. An
			// ordinary failure that may have had its effect; recording
			// it is fenced, and refused if a newer attempt did take over.
			cause = &stalledFailure{st}
		}
		if isTx {
			cause = NothingHappened(cause) // rolled back
		}
	case isTx && errors.Is(runErr, ErrLeaseLost):
		return rec, nil, true, r.lost(ctx, "taken over by a newer attempt: its transaction was refused", runErr)
	case isTx:
		if r.committed(ctx, c.Attempt) {
			return rec, nil, true, idemstore.Checkpoint(ctx, idemstore.AfterDone, r.key)
		}
		// The store's transaction failed, fn's writes with it. The attempt
		// left nothing behind; count it as a failure and retry.
		cause = NothingHappened(runErr)
	}
	failures := c.Record.Failures + 1
	r.log(ctx, slog.LevelWarn, "attempt failed", slog.Any("error", cause), slog.Int("failures", failures))
	if IsPermanent(cause) {
		return rec, cause, true, r.park(ctx, c.Attempt, failures, cause)
	}
	if !isHarmless(cause) {
		if settled, err := r.settleDoubt(ctx, c.Attempt, failures, cause); settled || err != nil {
			return rec, cause, true, err
		}
	}
	delay, ok := r.cfg.backoff.Next(failures)
	if !ok {
		return rec, cause, true, r.park(ctx, c.Attempt, failures, cause)
	}
	now := r.cfg.clock.Now()
	rec = idemstore.End{Status: StatusFailed, Now: now, NotBefore: now.Add(delay), Failures: failures, Error: cause.Error()}
	if err := r.finish(ctx, c.Attempt, rec); err != nil {
		return rec, cause, true, r.finishFailed(ctx, rec, err, cause)
	}
	return rec, cause, false, nil
}

// committed reports whether RunTx's transaction of attempt, which failed
// without an error of fn, committed after all (its COMMIT was applied and
// its answer lost): the key's record is done by attempt, which only that
// transaction marks. If so the run is done (Ran), with the value stored.
func (r *runner) committed(ctx context.Context, attempt int64) bool {
	rec, ok, err := r.s.Lookup(context.WithoutCancel(ctx), r.key)
	if err != nil || !ok || rec.Attempt != attempt || (rec.Status != StatusDone && !r.revisedAfter(rec)) {
		return false
	}
	r.held, r.res.Outcome, r.res.Value = 0, Ran, rec.Value
	r.log(ctx, slog.LevelInfo, "done: the transaction committed, though its answer was lost")
	return true
}

// backOff is the step after a failure of attempt was recorded as rec: it
// ends the call with ErrBackingOff when the next attempt, allowed at
// rec.NotBefore, would not start within RetryWithin (the next trigger
// makes it, honouring the stored backoff), and otherwise sleeps until then
// and returns nil to claim again.
func (r *runner) backOff(ctx context.Context, attempt int64, rec idemstore.End, cause error) error {
	if !r.retryInProcess(rec.NotBefore) {
		r.res.Outcome = BackingOff
		return &Error{Key: r.key, Outcome: BackingOff, Attempt: attempt, NotBefore: rec.NotBefore, Err: cause}
	}
	if err := sleep(ctx, r.cfg.clock, rec.NotBefore.Sub(rec.Now)); err != nil {
		r.res.Outcome = BackingOff
		return &Error{Key: r.key, Outcome: BackingOff, Attempt: attempt, NotBefore: rec.NotBefore,
			Err: errors.Join(cause, err)}
	}
	return nil
}

// retryInProcess reports whether this call sleeps until at and retries,
// by RetryWithin: only if at is within the bound of the call's start.
func (r *runner) retryInProcess(at time.Time) bool {
	within := DefaultRetryWithin
	switch {
	case r.cfg.retryWithinSet:
		within = r.cfg.retryWithin
	case r.oneAttempt:
		return false // idemtest's crash kit: one attempt per call
	case r.cfg.wait:
		return true // WaitForTurn without RetryWithin: until ctx ends
	}
	return within > 0 && !at.After(r.start.Add(within))
}

// settleDoubt asks the mode about an attempt that may have had its effect
// (cause says why it is in doubt). It returns done=true with the run's final
// error when the key is settled (done or unknown) or parked; done=false, nil
// to go on and run fn.
func (r *runner) settleDoubt(ctx context.Context, attempt int64, failures int, cause error) (bool, error) {
	v, herr := r.cfg.mode.check(ctx, r.key)
	now := r.cfg.clock.Now()
	switch v {
	case verdictDone:
		end := idemstore.End{Status: StatusDone, Now: now, Cursor: r.cfg.cursor}
		if err := r.finish(ctx, attempt, end); err != nil {
			return true, r.finishFailed(ctx, end, err, nil)
		}
		r.res.Outcome = Recovered
		r.log(ctx, slog.LevelInfo, "recovered: the downstream has it")
		return true, idemstore.Checkpoint(ctx, idemstore.AfterDone, r.key)
	case verdictUnknown:
		msg := cause.Error()
		if herr != nil {
			msg = "downstream check failed: " + herr.Error() + "; after: " + msg
		}
		end := idemstore.End{Status: StatusUnknown, Now: now, Failures: failures, Error: msg}
		if err := r.finish(ctx, attempt, end); err != nil {
			return true, r.finishFailed(ctx, end, err, cause)
		}
		r.log(ctx, slog.LevelError, "outcome unknown", slog.String("cause", msg))
		return true, r.fail(Unknown, errors.Join(cause, herr))
	}
	// verdictRerun: an attempt that died counts as a failure.
	if _, ok := r.cfg.backoff.Next(failures); !ok && failures > 0 {
		return true, r.park(ctx, attempt, failures, cause)
	}
	return false, nil
}

func (r *runner) park(ctx context.Context, attempt int64, failures int, cause error) error {
	end := idemstore.End{Status: StatusParked, Now: r.cfg.clock.Now(), Failures: failures, Error: cause.Error()}
	if err := r.finish(ctx, attempt, end); err != nil {
		return r.finishFailed(ctx, end, err, cause)
	}
	r.log(ctx, slog.LevelError, "parked until Reset", slog.Any("error", cause), slog.Int("failures", failures))
	return r.fail(Parked, cause)
}

// finishFailed turns an error from Store.Finish, recording end, into the
// run's error. cause is why the attempt failed, if it did.
func (r *runner) finishFailed(ctx context.Context, end idemstore.End, err, cause error) error {
	if idemstore.IsStop(err) {
		return err
	}
	if errors.Is(err, ErrLeaseLost) {
		what := map[Status]string{StatusDone: "done mark", StatusFailed: "failure record",
			StatusUnknown: "unknown mark", StatusParked: "parked mark"}[end.Status]
		var sf *stalledFailure
		if errors.As(cause, &sf) {
			return r.lost(ctx, sf.st.detail()+" and a newer attempt took the key over: its "+what+" was refused", err, sf.st)
		}
		msg := "taken over by a newer attempt: its " + what + " was refused"
		if cause != nil {
			msg += " (after: " + cause.Error() + ")"
		}
		return r.lost(ctx, msg, err, cause)
	}
	if end.Status == StatusUnknown && idemstore.IsFatal(err) {
		// The store refuses writes (a failed fsync): the attempt stays
		// running in it, and its mode's next claim finds it unknown.
		return r.fail(Unknown, errors.Join(fmt.Errorf("finish: %w", err), cause))
	}
	return r.fail(Failed, errors.Join(fmt.Errorf("finish: %w", err), cause))
}

// Retries of a Store.Finish that failed on what may be a transient store
// error (a dropped connection, a full disk being cleaned up): the write is
// fenced by the attempt, so writing it again is safe.
const (
	finishTries      = 5
	finishRetryFirst = 50 * time.Millisecond
	finishRetryMax   = time.Second
)

// finish records how attempt ended, retrying a store error a few times with
// a short backoff, never past the attempt's lease end by the engine's clock
// (after it another attempt may take the key). Not retried: ErrLeaseLost, a
// crash point's stop, and a store that refuses writes for good (a state
// file after a failed fsync).
func (r *runner) finish(ctx context.Context, attempt int64, end idemstore.End) error {
	delay := finishRetryFirst
	for try := 1; ; try++ {
		err := r.s.Finish(ctx, r.key, attempt, end)
		if err != nil && try > 1 && errors.Is(err, ErrLeaseLost) && r.landed(ctx, attempt, end) {
			err = nil // an earlier try was recorded, though its answer was lost
		}
		if err == nil {
			r.held = 0
			return nil
		}
		if try == finishTries || idemstore.IsStop(err) || errors.Is(err, ErrLeaseLost) || idemstore.IsFatal(err) {
			return err
		}
		if !r.cfg.clock.Now().Add(delay).Before(r.leaseEnd) {
			return err
		}
		r.log(ctx, slog.LevelWarn, "recording the attempt's end failed; retrying", slog.String("status", string(end.Status)),
			slog.Int("try", try), slog.Duration("delay", delay), slog.Any("error", err))
		if sleep(context.WithoutCancel(ctx), r.cfg.clock, delay) != nil {
			return err
		}
		delay = min(2*delay, finishRetryMax)
	}
}

// landed reports whether the key's record shows attempt ended as end says:
// a Finish that failed (its connection dropped before the answer came) may
// still have committed.
func (r *runner) landed(ctx context.Context, attempt int64, end idemstore.End) bool {
	rec, ok, err := r.s.Lookup(context.WithoutCancel(ctx), r.key)
	return err == nil && ok && rec.Attempt == attempt && (rec.Status == end.Status || (end.Status == StatusDone && r.revisedAfter(rec)))
}

// revisedAfter reports whether rec, a record of the attempt that runs, has
// a revision above the one it claimed: its done mark landed and made a
// re-run's revision (a request came while it held the key: Rerun's
// RerunAfterRun), so the record is failed, not done.
func (r *runner) revisedAfter(rec Record) bool { return rec.Revision > r.revision }

// attempt runs one attempt of fn (with heartbeat) and marks it done, or
// runs tx. It returns nil when the key is done.
func (r *runner) attempt(ctx context.Context, attempt, prev int64, doubt bool, fn valueFunc, tx txBody) (err error) {
	ctx, endSpan := startAttemptSpan(ctx, r.key, attempt, prev, r.revision, doubt)
	defer func() { endSpan(idemstore.SpanEnd{Err: err}) }()
	info := Info{Key: r.key, Attempt: attempt, RequestID: r.key.RevisionRequestID(r.revision), Owner: r.owner, Revision: r.revision}
	fctx := context.WithValue(ctx, infoKey{}, info)
	r.res.Attempts++
	if tx != nil {
		// Wait for the rates' starts here, outside the store's
		// transaction; the body uses them right before fn (useLimits).
		if err := readyLimits(ctx); err != nil {
			return NothingHappened(fmt.Errorf("fn did not start: %w", err))
		}
		stored, err := tx(fctx, attempt, r.cfg.clock.Now())
		if err != nil {
			return err
		}
		r.held, r.res.Value = 0, stored
		return idemstore.Checkpoint(ctx, idemstore.AfterDone, r.key)
	}

	lease := newLeaseState(r.cfg.clock, r.claimedAt.Add(r.cfg.lease))
	fctx = context.WithValue(withoutOutbox(fctx), leaseKey{}, lease)
	fctx, cancel := context.WithCancelCause(fctx)
	stopHeartbeat := r.startHeartbeat(fctx, attempt, lease, cancel)
	defer stopHeartbeat() // also when fn panics
	// The rates' starts go now, or are taken again (the heartbeat keeps
	// the lease meanwhile): a start reserved before a claim that stalled
	// must not go together with the ones reserved since.
	var value []byte
	err = startLimits(fctx)
	if err != nil {
		err = NothingHappened(fmt.Errorf("fn did not start: %w", err))
	} else {
		value, err = fn(fctx)
	}
	stopHeartbeat()
	r.leaseEnd = time.Unix(0, lease.until.Load())
	var to *takeoverError
	if errors.As(context.Cause(fctx), &to) {
		msg, errs := "taken over by a newer attempt (found by a lease renewal)", []error{to}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrLeaseLost) {
			msg += "; fn returned: " + err.Error()
			errs = append(errs, err)
		}
		return r.lost(ctx, msg, errs...)
	}
	if err != nil {
		return &fnError{err}
	}
	if err := idemstore.Checkpoint(ctx, idemstore.AfterFn, r.key); err != nil {
		return err
	}
	end := idemstore.End{Status: StatusDone, Now: r.cfg.clock.Now(), Cursor: r.cfg.cursor, Value: value}
	if err := r.finish(ctx, attempt, end); err != nil {
		if idemstore.IsStop(err) {
			return err
		}
		if errors.Is(err, ErrLeaseLost) {
			return r.finishFailed(ctx, end, err, nil)
		}
		// The done mark may not be durable. Do not report success; the
		// attempt is recovered by its mode.
		return fmt.Errorf("idem: done mark: %w", err)
	}
	r.res.Value = value
	return idemstore.Checkpoint(ctx, idemstore.AfterDone, r.key)
}

// mismatch is the error of a call with fingerprint given for a key claimed
// with stored: outcome ParamsMismatch, the detail naming both fingerprints.
func mismatch(key Key, stored, given string) *Error {
	me := &idemstore.MismatchError{Key: key, Stored: stored, Given: given}
	return &Error{Key: key, Outcome: ParamsMismatch, Err: details(fmt.Sprintf("claimed with params %s, this call has %s; nothing ran",
		idemstore.ShortFingerprint(stored), idemstore.ShortFingerprint(given)), me)}
}

func lastError(rec Record) error {
	if rec.LastError == "" {
		return nil
	}
	return errors.New(rec.LastError)
}
