// Package core is the root package's engine as the subsystem packages of
// this module (catchup, scheduler) see it: what package idem lends them
// through internal/hook.
package core

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/breaker"
	"github.com/idemgo/idem/internal/hook"
)

// Root is what package idem lends (its hooks type).
type Root interface {
	NewOption(name, class string, payload any) idem.Option
	InternalOption(retryFrom time.Time, cursor bool) idem.Option
	Configure(s any, call string, opts []idem.Option) any
	Plain(opts []idem.Option) []idem.Option
	Payload(o idem.Option) any
	Observers(opts []idem.Option) func(idem.Result)
	WithJobObserver(ctx context.Context, f func(idem.Result)) context.Context
	Mismatch(key idem.Key, stored, given string) error
	LastError(rec idem.Record) error
	IsPermanent(err error) bool
	Sleep(ctx context.Context, c idem.Clock, d time.Duration) error
	CheckBackoff(b idem.Backoff) error

	Each(ctx context.Context, s any, storeErr error, key idem.Key, items iter.Seq2[string, error], fn func(context.Context, string) error,
		opts []idem.Option, tx func(clock idem.Clock) any) (idem.Outcome, idem.ItemCounts, []string, error)
	DefaultWorkers() int
	Workers(n int) idem.Option
	Batch(n int) idem.Option
	Progress(f func(key idem.Key, done, total int64)) idem.Option
	Rate(perSecond float64, burst int) idem.Option
	Pause(d time.Duration) idem.Option
	Breaker(b *breaker.Breaker) idem.Option
	Limits(ls []any) idem.Option
}

// A Config is a call's config: the engine's defaults, the store's, and
// the call's options.
type Config interface {
	Err() error // the first invalid option's
	Clock() idem.Clock
	Logger() *slog.Logger
	Observer() func(idem.Result)
	Fingerprint() string
	Lease() time.Duration
	Ext() []any // the payloads of the subsystem packages' options, in order
	Keep(err error)
}

// R is package idem's hooks.
var R = hook.Root.(Root)

// Configure is the config of the call named call on s with opts.
func Configure(s any, call string, opts []idem.Option) Config {
	return R.Configure(s, call, opts).(Config)
}

// NewOption is an option of a subsystem package (see idem's hooks).
func NewOption(name, class string, payload any) idem.Option { return R.NewOption(name, class, payload) }

// InvalidOption is the error of an option given a value it cannot take: it
// matches idem.ErrInvalidOption.
func InvalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{idem.ErrInvalidOption}, args...)...)
}
