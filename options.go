package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// An Option configures a call: [Run], [RunTx] and their variants, a
// catch-up, a fan-out, a Scheduler or one of its jobs, or a store's
// defaults (the options given to [OpenLedger], [OpenStateFile] or another
// store's constructor). It is one type for every call, so that one slice
// of options can be shared; each option says which calls it is for, and
// one given to a call it is not for is an error matching
// [ErrInvalidOption] that names the option and the call, returned before
// anything is written. A store's default that does not fit a call is
// ignored there (a mode on RunTx, which is exactly once in the store's
// database).
//
// The options: for every call, [WithLease], [WithBackoff], [WithClock],
// [WithLogger], [OnResult], [WithGuard]; the modes [AtLeastOnce],
// [AtMostOnce], [TwoPhase] (not for the transactional calls); how long to
// try, [RetryWithin], [OneAttempt], [WaitForTurn] (not for a fan-out);
// the work's parameters, [WithParams], [WithParamsBytes] (not for a
// store's or a Scheduler's defaults); [ReportTo] (Run and RunTx only);
// [WithLockWait] (a store's only).
type Option interface {
	option() *option
}

// An option is an Option: its name for errors, the calls it is for, and
// what it sets.
type option struct {
	name  string
	class optionClass
	apply func(*config) error
}

func (o *option) option() *option { return o }

// newOption is the option named name (its constructor's name) of class.
func newOption(name string, class optionClass, apply func(*config) error) Option {
	return &option{name: name, class: class, apply: apply}
}

// An optionClass is the kind of an option; each call takes some kinds.
type optionClass uint16

const (
	classCommon    optionClass = 1 << iota // every call and store
	classMode                              // a recovery mode
	classAttempt                           // how long a call tries a key
	classReport                            // ReportTo
	classCatchUp                           // a catch-up policy
	classJob                               // how a Scheduler triggers a job
	classFanOut                            // how Each works its items
	classParams                            // the work's parameters
	classScheduler                         // a Scheduler's own
	classStore                             // a store's own
	classInternal                          // made by a subsystem package for the calls it makes
)

// A call is a call that takes options, by what it takes.
type call struct {
	name  string
	takes optionClass
}

var (
	callRun       = call{"Run", classCommon | classMode | classAttempt | classReport | classParams | classInternal}
	callRunTx     = call{"RunTx", classCommon | classAttempt | classReport | classParams | classInternal}
	callCatchUp   = call{"CatchUp", classCommon | classMode | classAttempt | classCatchUp | classParams | classInternal}
	callCatchUpTx = call{"CatchUpTx", classCommon | classAttempt | classCatchUp | classParams | classInternal}
	callEach      = call{"Each", classCommon | classMode | classFanOut | classParams}
	callEachTx    = call{"EachTx", classCommon | classFanOut | classParams}
	callJob       = call{"Scheduler.Add", classCommon | classMode | classAttempt | classCatchUp | classJob | classParams}
	callJobTx     = call{"AddTx", classCommon | classAttempt | classCatchUp | classJob | classParams}
	callScheduler = call{"NewScheduler", classCommon | classScheduler}
	callStore     = call{"a store's defaults", classCommon | classMode | classAttempt | classStore}
)

// allCalls is every call that takes options.
var allCalls = []call{callRun, callRunTx, callCatchUp, callCatchUpTx, callEach, callEachTx, callJob, callJobTx, callScheduler, callStore}

// callsTaking names the calls that take options of class cl, for errors.
func callsTaking(cl optionClass) string {
	var names []string
	for _, c := range allCalls {
		if c.takes&cl != 0 {
			names = append(names, c.name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// fits reports whether o is for c.
func (c call) fits(o *option) bool { return c.takes&o.class != 0 }

// misfit is the error of o given to c, which it is not for.
func (c call) misfit(o *option) error {
	return invalidOption("%s is not an option of %s: it is for %s", o.name, c.name, callsTaking(o.class))
}

// withoutClasses is opts without the options of the classes in mask; nil
// options are kept, for the error of the call they are given to.
func withoutClasses(opts []Option, mask optionClass) []Option {
	var out []Option
	for _, o := range opts {
		if o == nil || o.option().class&mask == 0 {
			out = append(out, o)
		}
	}
	return out
}

// invalidOption is the error of an option given a value it cannot take.
func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// DefaultLease is how long a claim holds without renewal. A running attempt
// renews it every third of the lease, so it only expires when the holder
// has died or stalled.
const DefaultLease = time.Minute

// MinLease is the shortest lease [WithLease] accepts.
const MinLease = 3 * time.Millisecond

// defaultBackoff is built once: a Backoff is stateless.
var defaultBackoff = DefaultBackoff()

type config struct {
	mode    mode
	lease   time.Duration
	backoff Backoff
	wait    bool
	poll    time.Duration
	// pollFirst, if set, is the first wait for a key another holder runs
	// (WaitForTurn): the waits double from there up to poll. Each's own
	// mark of its period sets it.
	pollFirst time.Duration
	clock     Clock
	logger    *slog.Logger
	observer  func(Result)
	report    *Result
	result    *Result // internal: RunValue's copy of the result
	each      eachConfig
	catchUp   catchUpSettings    // the catch-up options' (CatchUp, a Scheduler's job)
	onPeriod  func(PeriodResult) // OnPeriod
	job       jobConfig          // a Scheduler job's own options
	sched     schedulerConfig    // a Scheduler's own options
	// cursor: the done mark advances the job's cursor (a catch-up's
	// period in an unbroken run of settled ones).
	cursor bool

	fingerprint string // WithParams: the fingerprint of the work's parameters; "" for none
	guards      []Guard
	limits      []Limiter // WithLimits

	retryWithin    time.Duration // RetryWithin's bound
	retryWithinSet bool          // RetryWithin (or OneAttempt) was given
	retryFrom      time.Time     // internal: the start of the call the bound counts from (idem.CatchUp's), if not the Run's own

	spanCall string // internal: the call's name in its span (idemstore.SpanRun's AttrCall), when not Run's or RunTx's

	lockWait time.Duration // WithLockWait: a SQLite ledger's bound of a write's wait for the write lock; 0 for the default

	err error // the first invalid option: the call returns it before doing anything
}

// defaulter is a store with default options for the calls on it: those
// given to OpenLedger, OpenStateFile or another store's constructor.
type defaulter interface{ DefaultOptions() []Option }

// newConfig is the engine's defaults, then those of s's defaults that fit
// the call cl.
func newConfig(s any, cl call) *config {
	c := &config{
		mode:    atLeastOnce,
		lease:   DefaultLease,
		backoff: defaultBackoff,
		poll:    200 * time.Millisecond,
		clock:   systemClock{},
		each:    eachConfig{workers: DefaultWorkers},
		catchUp: catchUpSettings{MaxPeriods: DefaultMaxPeriods},
		sched:   schedulerConfig{maxRunning: DefaultMaxRunning},
	}
	if d, ok := s.(defaulter); ok {
		for _, o := range d.DefaultOptions() {
			if o != nil && cl.fits(o.option()) {
				c.keep(o.option().apply(c))
			}
		}
	}
	return c
}

// keep keeps err as the config's error if it is the first.
func (c *config) keep(err error) {
	if err != nil && c.err == nil {
		c.err = err
	}
}

// configure is the config of the call cl on s with the call's options
// opts: the engine's defaults, then s's, then opts. The first invalid
// option's error is kept in c.err; the others are applied all the same, so
// that a ReportTo or an observer learns of the call's failure.
func configure(s any, cl call, opts []Option) *config {
	c := newConfig(s, cl)
	applyOptions(c, cl, opts)
	return c
}

// configureEach is configure for Each and EachTx: a call that has no
// OnResult of its own (its store's defaults aside) reports to the
// observers of the Scheduler job whose fn made it (ctx), after its
// store's.
func configureEach(ctx context.Context, s any, cl call, opts []Option) *config {
	c := newConfig(s, cl)
	base := c.observer
	c.observer = nil
	applyOptions(c, cl, opts)
	own := c.observer
	if own == nil {
		own, _ = ctx.Value(jobObserverKey{}).(func(Result))
	}
	c.observer = chainObservers(base, own)
	return c
}

// jobObserverKey carries a Scheduler job's observers (withJobObserver) in
// the context of its fn.
type jobObserverKey struct{}

// chainObservers calls a, then b; either may be nil.
func chainObservers(a, b func(Result)) func(Result) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(r Result) { a(r); b(r) }
}

// applyOptions applies opts, the options of the call cl, to c: an option
// that cl does not take is an error naming both.
func applyOptions(c *config, cl call, opts []Option) {
	for i, o := range opts {
		switch {
		case o == nil:
			c.keep(invalidOption("%s: option %d of %d is nil", cl.name, i+1, len(opts)))
		case !cl.fits(o.option()):
			c.keep(cl.misfit(o.option()))
		default:
			c.keep(o.option().apply(c))
		}
	}
}

// storeConfig is the config that the defaults opts of a store make: how
// its constructor validates them, and takes the clock of the times the
// store takes itself (a Resolve's now): that of WithClock among opts, else
// the system clock.
func storeConfig(opts []Option) *config {
	c := newConfig(nil, callStore)
	applyOptions(c, callStore, opts)
	return c
}

// Options of every call (class Option).

// WithLease sets how long a claim holds without renewal (default
// [DefaultLease]). A running attempt renews it every third of d. A d below
// [MinLease] is an error matching [ErrInvalidOption], returned by the call
// before anything is written.
//
// A lease only expires when its holder died or stalled; a stalled holder
// that wakes up after another took over is cancelled at its next renewal,
// and its done mark is refused, but what fn did meanwhile stands. Choose d
// far above any pause the process can suffer, and see [CheckLease].
func WithLease(d time.Duration) Option {
	return newOption("WithLease", classCommon, func(c *config) error {
		if d < MinLease {
			return invalidOption("WithLease(%v): a lease must be at least %v", d, MinLease)
		}
		c.lease = d
		return nil
	})
}

// WithBackoff sets the retry policy (default [DefaultBackoff]). A nil b, or
// one that a Backoff constructor made from a bad value (Exponential(0),
// say), is an error matching [ErrInvalidOption], returned by the call
// before anything is written.
func WithBackoff(b Backoff) Option {
	return newOption("WithBackoff", classCommon, func(c *config) error {
		if err := CheckBackoff(b); err != nil {
			return invalidOption("WithBackoff: %s", err)
		}
		c.backoff = b
		return nil
	})
}

// WithClock sets the clock for leases, backoff and waits. A nil clk is an
// error matching [ErrInvalidOption].
func WithClock(clk Clock) Option {
	return newOption("WithClock", classCommon, func(c *config) error {
		if clk == nil {
			return invalidOption("WithClock(nil): no clock")
		}
		c.clock = clk
		return nil
	})
}

// WithLogger logs claims, completions, failures and recoveries to l, with
// the call's context. By default, and with a nil l, nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return newOption("WithLogger", classCommon, func(c *config) error { c.logger = l; return nil })
}

// OnResult calls f with the [Result] of every call, for metrics: once
// at the end of every Run and RunTx; once per period for [CatchUp] and
// [CatchUpTx] (each period is a Run; a period [CatchUpLatest] skips is one
// too); once per period for Each and EachTx, with the period's item counts
// (Result.Items). f must be quick and must not block. Several observers
// are all called, in order. A nil f is an error matching
// [ErrInvalidOption].
//
// Given to a Scheduler (a default of its jobs) or to one of its jobs, f
// also observes the Each and EachTx calls that the job's fn makes with
// the context it gets, unless such a call is given an OnResult of its
// own (then only that one, and the store's defaults, observe it): pass
// the Scheduler's metrics once.
func OnResult(f func(Result)) Option {
	return newOption("OnResult", classCommon, func(c *config) error {
		if f == nil {
			return invalidOption("OnResult(nil): no function to call")
		}
		if prev := c.observer; prev != nil {
			c.observer = func(r Result) { prev(r); f(r) }
			return nil
		}
		c.observer = f
		return nil
	})
}

// WithGuard adds g to the call's guards ([Guard]): Run asks them before
// its claim, [CatchUp] before each period's, Each and EachTx before each
// claim and before each window of items is marked started (the window
// already started when a guard refuses still runs). A guard that refuses
// defers the call ([ErrDeferred]). Several guards are asked in the order
// given; as a store default ([OpenLedger]'s options) a guard applies to
// every call on the store. A nil g, or a guard.MemoryGuard whose Limit is
// not a fraction, is an error matching [ErrInvalidOption].
func WithGuard(g Guard) Option {
	return newOption("WithGuard", classCommon, func(c *config) error {
		if g == nil {
			return invalidOption("WithGuard(nil): no guard")
		}
		if v, ok := g.(validGuard); ok {
			if err := v.Validate(); err != nil {
				return invalidOption("WithGuard(%s)", err)
			}
		}
		c.guards = append(c.guards[:len(c.guards):len(c.guards)], g)
		return nil
	})
}

// CheckStoreOptions returns the error of the first invalid option among
// opts (one matching [ErrInvalidOption] that names the option and its
// value), or nil. A store's constructor calls it to refuse bad defaults
// at once, rather than at every call that uses them.
func CheckStoreOptions(opts ...Option) error { return storeConfig(opts).err }

// Parameters (class ParamsOption).

// WithParams makes v, the parameters of the work (a rate table's version,
// the accounts to settle, a script's arguments), part of what a key means.
// Its fingerprint, the SHA-256 of v's canonical JSON (encoding/json, object
// keys sorted, no insignificant space: a struct and the map of the same
// fields and values give the same one), is stored with the key at its first
// claim. A later call for the key with a different fingerprint, whether a
// Run, RunTx, [CatchUp], Each, a Scheduler's job or the idem command, returns an error matching
// [ErrParamsMismatch] that names the key and both fingerprints; it runs
// nothing and writes nothing, even when the key is done. A call without
// WithParams is not checked, and a key first claimed without one takes the
// fingerprint of the first call that gives one. Resolve and Reset keep it.
//
// In [CatchUp] every period's key is checked and stored with v: a period
// recorded with other parameters, settled or not, stops the call with
// ErrParamsMismatch, and a call with nothing due checks the latest due
// period (a duplicate trigger with other parameters is refused). A Scheduler's jobs differ (and only they): a period
// left unsettled (failed, running, parked) by a run with other parameters
// stops the job's catch-up, as a parked period does, and makes the
// Scheduler unready ([JobStatus].ParamsMismatch) until a person settles
// it: runs it with its own parameters, or resolves it; but a period
// settled with other parameters is passed over, and a look with nothing
// due checks nothing, so that a deploy with new parameters applies them
// from the next unsettled period on. In Each the
// period's key is checked before any item runs, but the fingerprint is only
// stored with the period's done mark: while a first Each of the period is
// still working its items, one with other parameters is not refused.
//
// A v that encoding/json cannot encode is an error matching
// [ErrInvalidOption], returned before anything is written.
func WithParams(v any) Option {
	b, err := canonicalJSON(v)
	return newOption("WithParams", classParams, func(c *config) error {
		if err != nil {
			return invalidOption("WithParams(%T): %s", v, err)
		}
		c.fingerprint = fingerprint(b)
		return nil
	})
}

// WithParamsBytes is [WithParams] for parameters given as bytes: the
// fingerprint is the SHA-256 of b as it is. WithParams(v) is
// WithParamsBytes of v's canonical JSON; the idem command's --params s is
// WithParamsBytes([]byte(s)).
func WithParamsBytes(b []byte) Option {
	fp := fingerprint(b)
	return newOption("WithParamsBytes", classParams, func(c *config) error { c.fingerprint = fp; return nil })
}

// fingerprint is the stored form of a fingerprint: lowercase hex SHA-256.
func fingerprint(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalJSON encodes v as JSON, then decodes and encodes it again as a
// generic value: object keys come out sorted, whatever v's field order, and
// numbers keep their text.
func canonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var g any
	if err := d.Decode(&g); err != nil {
		return nil, err
	}
	return json.Marshal(g)
}

// Modes (class ModeOption; TwoPhase is in twophase.go).

// AtLeastOnce is the default mode: an attempt that died, or whose fn failed,
// is run again. Use it when running fn twice is harmless: fn upserts
// recomputed results by a business key, or the downstream deduplicates by
// [Key.RequestID].
//
//	failure                           what happens
//	crash before the claim            next Run runs fn
//	crash after claim, before done    lease expires; next Run runs fn again
//	crash after done                  next Run: AlreadyDone, fn does not run
//	fn returns an error               retried with backoff; parked after the last attempt
//	duplicate / concurrent trigger    one runs; others get AlreadyDone or ErrInProgress
//	lease lost while fn runs          fn's context is cancelled; its done is refused (ErrLeaseLost)
//	power loss                        a done mark that Run reported is never lost
//
// It does NOT promise that fn runs once: after a crash between fn's effect
// and the done mark, fn runs again.
func AtLeastOnce() Option {
	return newOption("AtLeastOnce", classMode, func(c *config) error { c.mode = atLeastOnce; return nil })
}

// AtMostOnce never runs fn again for a key once an attempt may have had its
// effect. Use it when a second run is worse than none and nothing can be
// asked afterwards.
//
//	failure                           what happens
//	crash before the claim            next Run runs fn
//	crash after claim, before done    next Run: ErrUnknownOutcome until Resolve
//	crash after done                  next Run: AlreadyDone
//	fn returns an error               ErrUnknownOutcome, unless fn wrapped it in NothingHappened (then retried)
//	duplicate / concurrent trigger    one runs; others get AlreadyDone or ErrInProgress
//	lease lost while fn runs          fn's context is cancelled; the key ends unknown
//	power loss                        the claim is durable before fn starts, so fn is not run twice
//
// It does NOT promise that fn runs at all: a crash leaves the key unknown
// for a person to Resolve.
func AtMostOnce() Option {
	return newOption("AtMostOnce", classMode, func(c *config) error { c.mode = atMostOnce; return nil })
}

// How long a call tries (class AttemptOption).

// DefaultRetryWithin is how long one call of Run (or [CatchUp]) goes on
// retrying a failing fn in-process, unless [RetryWithin] says otherwise.
const DefaultRetryWithin = time.Minute

// RetryWithin bounds how long one call retries in-process: after fn fails,
// Run sleeps for the backoff's delay and tries again only if that retry
// would start within d of the call's start (for [CatchUp], of the catch-up
// call's start). Otherwise it records the failure with the time of the next
// allowed attempt and returns ErrBackingOff at once, leaving the retry to
// the next trigger (the next cron tick, timer or call), which honours the
// stored backoff. Default [DefaultRetryWithin]; with [WaitForTurn] and no
// RetryWithin, retries go on until ctx ends.
//
// So a cron job is not blocked for the length of an outage: with the
// defaults, a trigger returns within about a minute, and the failure count
// carries over to the next trigger until [DefaultBackoff] gives up.
//
// d = 0 means one attempt per call ([OneAttempt]). A negative d is an error
// matching [ErrInvalidOption], returned before anything is written. [Each]
// waits for its items' backoffs until ctx ends, whatever d is.
func RetryWithin(d time.Duration) Option {
	return newOption("RetryWithin", classAttempt, func(c *config) error {
		if d < 0 {
			return invalidOption("RetryWithin(%v): the bound must not be negative", d)
		}
		c.retryWithin, c.retryWithinSet = d, true
		return nil
	})
}

// OneAttempt makes Run try fn at most once per call: a failure is recorded
// with the backoff's next allowed time and Run returns ErrBackingOff (or
// ErrParked) at once, instead of sleeping and retrying in-process. The next
// call (the next cron tick) honours the stored backoff. Use it when a
// scheduler re-runs the job anyway. It is RetryWithin(0).
func OneAttempt() Option { return RetryWithin(0) }

// WaitForTurn makes Run wait, until ctx ends, for a key that another holder is
// running or that is backing off, instead of returning ErrInProgress or
// ErrBackingOff at once; in [CatchUp], every period's Run waits so. Unless
// [RetryWithin] (or [OneAttempt]) is given as well, it also retries its own
// failures in-process until ctx ends.
func WaitForTurn() Option {
	return newOption("WaitForTurn", classAttempt, func(c *config) error { c.wait = true; return nil })
}

// Reports (class ReportOption).

// ReportTo stores the Run's [Result] in *r when it returns, so the caller can
// tell "ran now" from "already done" without looking at errors. A nil r is
// an error matching [ErrInvalidOption].
func ReportTo(r *Result) Option {
	return newOption("ReportTo", classReport, func(c *config) error {
		if r == nil {
			return invalidOption("ReportTo(nil): nowhere to store the result")
		}
		c.report = r
		return nil
	})
}
