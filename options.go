package idem

import (
	"fmt"
	"log/slog"
	"time"
)

// An Option configures a Run (and CatchUp and Each). Options passed to
// [OpenLedger] or [OpenStateFile] become that store's defaults, used by
// every Run, CatchUp and Each on it; options passed to the call override
// them. A store of another package provides defaults with a method
// DefaultOptions() []Option.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// DefaultLease is how long a claim holds without renewal. A running attempt
// renews it every third of the lease, so it only expires when the holder
// has died or stalled.
const DefaultLease = time.Minute

// defaultBackoff is built once: a Backoff is stateless.
var defaultBackoff = DefaultBackoff()

type config struct {
	mode     mode
	lease    time.Duration
	backoff  Backoff
	wait     bool
	poll     time.Duration
	clock    Clock
	logger   *slog.Logger
	observer func(Result)
	report   *Result
	catchUp  catchUpConfig
	each     eachConfig

	retryWithin    time.Duration // RetryWithin's bound
	retryWithinSet bool          // RetryWithin (or OneAttempt) was given
	retryFrom      time.Time     // internal: the start of the call the bound counts from (CatchUp's), if not the Run's own

	err error // an invalid option: Run, CatchUp and Each return it before doing anything
}

// defaulter is a store with default options for the Runs on it: those
// given to OpenLedger, OpenStateFile or another store's constructor.
type defaulter interface{ DefaultOptions() []Option }

// newConfig applies base, then s's defaults, then opts: the caller's options
// win.
func newConfig(s Store, base []Option, opts []Option) *config {
	if d, ok := s.(defaulter); ok {
		base = append(append([]Option(nil), base...), d.DefaultOptions()...)
	}
	return newConfigFrom(base, opts)
}

// storeClock is the clock of a store opened with opts (OpenLedger,
// NewLedger, OpenStateFile) for the times it takes itself, such as a
// Resolve's now: that of WithClock among opts, else the system clock. The
// store keeps it; it is read once, at open.
func storeClock(opts []Option) Clock { return newConfigFrom(opts, nil).clock }

func newConfigFrom(defaults []Option, opts []Option) *config {
	c := &config{
		mode:    atLeastOnce,
		lease:   DefaultLease,
		backoff: defaultBackoff,
		poll:    200 * time.Millisecond,
		clock:   systemClock{},
	}
	for _, o := range defaults {
		o.apply(c)
	}
	for _, o := range opts {
		o.apply(c)
	}
	return c
}

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
func AtLeastOnce() Option { return optionFunc(func(c *config) { c.mode = atLeastOnce }) }

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
func AtMostOnce() Option { return optionFunc(func(c *config) { c.mode = atMostOnce }) }

// WithLease sets how long a claim holds without renewal (default
// [DefaultLease]). A running attempt renews it every third of d. Values
// below 3 ms are raised to 3 ms.
//
// A lease only expires when its holder died or stalled; a stalled holder
// that wakes up after another took over is cancelled at its next renewal,
// and its done mark is refused, but what fn did meanwhile stands. Choose d
// far above any pause the process can suffer, and see [CheckLease].
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) { c.lease = max(d, 3*time.Millisecond) })
}

// WithBackoff sets the retry policy (default [DefaultBackoff]).
func WithBackoff(b Backoff) Option { return optionFunc(func(c *config) { c.backoff = b }) }

// WithWait makes Run wait, until ctx ends, for a key that another holder is
// running or that is backing off, instead of returning ErrInProgress or
// ErrBackingOff at once. Unless [RetryWithin] (or [OneAttempt]) is given as
// well, it also retries its own failures in-process until ctx ends.
func WithWait() Option { return optionFunc(func(c *config) { c.wait = true }) }

// WithClock sets the clock for leases, backoff and waits.
func WithClock(clk Clock) Option { return optionFunc(func(c *config) { c.clock = clk }) }

// WithLogger logs claims, completions, failures and recoveries to l.
// By default nothing is logged.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithObserver calls f once at the end of every Run with its [Result]
// (for metrics). f must be quick and must not block.
func WithObserver(f func(Result)) Option {
	return optionFunc(func(c *config) {
		if prev := c.observer; prev != nil && f != nil {
			c.observer = func(r Result) { prev(r); f(r) }
			return
		}
		c.observer = f
	})
}

// DefaultRetryWithin is how long one call of Run (or CatchUp) goes on
// retrying a failing fn in-process, unless [RetryWithin] says otherwise.
const DefaultRetryWithin = time.Minute

// RetryWithin bounds how long one call retries in-process: after fn fails,
// Run sleeps for the backoff's delay and tries again only if that retry
// would start within d of the call's start (for [CatchUp], of the CatchUp
// call's start). Otherwise it records the failure with the time of the next
// allowed attempt and returns ErrBackingOff at once, leaving the retry to
// the next trigger (the next cron tick, timer or call), which honours the
// stored backoff. Default [DefaultRetryWithin]; with [WithWait] and no
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
	return optionFunc(func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("%w: RetryWithin(%v): the bound must not be negative", ErrInvalidOption, d)
			return
		}
		c.retryWithin, c.retryWithinSet = d, true
	})
}

// OneAttempt makes Run try fn at most once per call: a failure is recorded
// with the backoff's next allowed time and Run returns ErrBackingOff (or
// ErrGaveUp) at once, instead of sleeping and retrying in-process. The next
// call (the next cron tick) honours the stored backoff. Use it when a
// scheduler re-runs the job anyway. It is RetryWithin(0).
func OneAttempt() Option { return RetryWithin(0) }

// retryFrom makes the RetryWithin bound count from t, the start of the
// call (CatchUp) that runs this Run.
func retryFrom(t time.Time) Option { return optionFunc(func(c *config) { c.retryFrom = t }) }

// ReportTo stores the Run's [Result] in *r when it returns, so the caller can
// tell "ran now" from "already done" without looking at errors.
func ReportTo(r *Result) Option { return optionFunc(func(c *config) { c.report = r }) }

// Result describes one call of Run.
type Result struct {
	Key      Key
	Outcome  Outcome
	Attempt  int64         // the last attempt number this call held (0 if none)
	Attempts int           // how many times this call ran fn
	Duration time.Duration // how long the call took
	Err      error         // what Run returned
}
