package idem

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/breaker"
	"github.com/idemgo/idem/internal/hook"
	"github.com/idemgo/idem/internal/storeof"
)

// hooks is what the engine lends the subsystem packages of this module
// (catchup, scheduler), through internal/hook; internal/core declares its
// methods as an interface. It is no part of the API.
type hooks struct{}

func init() { hook.Root = hooks{} }

var classOf = map[string]optionClass{
	"catchup":   classCatchUp,
	"job":       classJob,
	"scheduler": classScheduler,
	"internal":  classInternal,
}

// NewOption is an Option of a subsystem package: named name, of the class
// named class, carrying payload (which its package reads back from
// Configure's Ext).
func (hooks) NewOption(name, class string, payload any) Option {
	c, ok := classOf[class]
	if !ok || payload == nil {
		panic(fmt.Sprintf("idem: option %s: class %q, payload %T", name, class, payload))
	}
	return &option{name: name, class: c, payload: payload}
}

// InternalOption is an option that sets the config's fields for a call a
// subsystem package makes: retryFrom (non-zero) and cursor.
func (hooks) InternalOption(retryFrom time.Time, cursor bool) Option {
	return &option{name: "internal", class: classInternal, apply: func(c *config) error {
		if !retryFrom.IsZero() {
			c.retryFrom = retryFrom
		}
		c.cursor = cursor
		return nil
	}}
}

// Configure is the config of the call named call (a subsystem package's)
// on s with opts: its defaults, s's, then opts; it is a *config, seen
// through internal/core's Config.
func (hooks) Configure(s any, call string, opts []Option) any {
	cl, ok := calls[call]
	if !ok {
		panic("idem: no call " + call)
	}
	if st, err := idemstore.Of(s); err == nil {
		s = st // its defaults: a Ledger's are its store's
	}
	return configure(s, cl, opts)
}

// Limits is limit.With's option of ls, each a limit of package limit.
func (hooks) Limits(ls []any) Option { return withLimits(ls) }

// Plain is opts without the options of subsystem packages: what a call
// of theirs passes on to Run or RunTx.
func (hooks) Plain(opts []Option) []Option {
	var plain []Option
	for _, o := range opts {
		if o == nil || o.option().payload == nil {
			plain = append(plain, o)
		}
	}
	return plain
}

// Payload is o's payload: nil for an option of this package.
func (hooks) Payload(o Option) any {
	if o == nil {
		return nil
	}
	return o.option().payload
}

// Observers is the observers (OnResult) among opts, called in order; nil
// if none.
func (hooks) Observers(opts []Option) func(Result) {
	var f func(Result)
	for _, o := range opts {
		if o != nil && o.option().class == classCommon {
			c := &config{}
			if o.option().apply(c) == nil {
				f = chainObservers(f, c.observer)
			}
		}
	}
	return f
}

// WithJobObserver is ctx carrying f, the observers of a Scheduler's job:
// the Each and EachTx calls of its fn report to them too.
func (hooks) WithJobObserver(ctx context.Context, f func(Result)) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, jobObserverKey{}, f)
}

// Mismatch is the error of a call for key whose parameters' fingerprint
// given differs from the stored one.
func (hooks) Mismatch(key Key, stored, given string) error { return mismatch(key, stored, given) }

// LastError is the error of rec's last failed attempt, if any.
func (hooks) LastError(rec Record) error { return lastError(rec) }

// IsPermanent reports whether err is marked Permanent.
func (hooks) IsPermanent(err error) bool { return isPermanent(err) }

// Sleep waits d on c, or until ctx ends (its cause is returned then).
func (hooks) Sleep(ctx context.Context, c Clock, d time.Duration) error { return sleep(ctx, c, d) }

// CheckBackoff is the error of a nil Backoff or one that a Backoff
// constructor made from a bad value.
func (hooks) CheckBackoff(b Backoff) error { return checkBackoff(b) }

// Each is a fan-out (package fanout's Each) of key's items with fn and
// opts; for EachTx, fn is nil and tx builds, from the call's clock, the
// function that runs a window of items in the store's transaction (of the
// type of txItems). It returns the period's outcome, its items' counts and
// the items this call parked. The store behind s must be an
// idemstore.ItemStore; storeErr, when not nil, is what the caller found
// wrong with it (EachTx's: not an ItemTxStore of its type): both are the
// call's error, reported as an invalid option's is.
func (hooks) Each(ctx context.Context, s any, storeErr error, key Key, items iter.Seq2[string, error], fn func(context.Context, string) error,
	opts []Option, tx func(clock Clock) any) (Outcome, ItemCounts, []string, error) {
	call := callEach
	if tx != nil {
		call = callEachTx
	}
	st, err := idemstore.Of(s)
	cfg := configureEach(ctx, st, call, opts)
	is, ok := st.(idemstore.ItemStore)
	switch {
	case storeErr != nil:
		cfg.err = storeErr
	case err != nil:
		cfg.err = fmt.Errorf("idem: %s: %w", call.name, err)
	case !ok:
		cfg.err = storeof.Lacks(call.name, s, "idemstore.ItemStore")
	}
	var t txItems
	if tx != nil {
		f := tx(cfg.clock).(func(context.Context, idemstore.ItemStep, []idemstore.ItemClaim, func(context.Context, idemstore.ItemClaim, func(context.Context) error) error,
			func(idemstore.ItemClaim, error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error))
		t = func(ctx context.Context, step idemstore.ItemStep, claims []idemstore.ItemClaim, item itemFunc, failed func(idemstore.ItemClaim, error) idemstore.ItemEnd) ([]idemstore.ItemEnd, []string, error) {
			return f(ctx, step, claims, item, failed)
		}
	}
	res, err := each(ctx, is, key, items, cfg, fn, t)
	return res.Outcome, res.Counts, res.Parked, err
}

// The options of a fan-out (package fanout's).

func (hooks) DefaultWorkers() int                                { return defaultWorkers }
func (hooks) Workers(n int) Option                               { return withWorkers(n) }
func (hooks) Batch(n int) Option                                 { return withBatch(n) }
func (hooks) Progress(f func(key Key, done, total int64)) Option { return onProgress(f) }
func (hooks) Rate(perSecond float64, burst int) Option           { return withRate(perSecond, burst) }
func (hooks) Pause(d time.Duration) Option                       { return withPause(d) }
func (hooks) Breaker(b *breaker.Breaker) Option                  { return withBreaker(b) }

// The config's fields, for a subsystem package.

func (c *config) Err() error             { return c.err }
func (c *config) Clock() Clock           { return c.clock }
func (c *config) Logger() *slog.Logger   { return c.logger }
func (c *config) Observer() func(Result) { return c.observer }
func (c *config) Fingerprint() string    { return c.fingerprint }
func (c *config) Lease() time.Duration   { return c.lease }
func (c *config) Ext() []any             { return c.ext }
func (c *config) Keep(err error)         { c.keep(err) }
