package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/idemgo/idem"
	"github.com/spf13/pflag"
)

// attemptFlags are the flags of how a command's attempts run, shared by
// 'idem run' and 'idem serve'.
type attemptFlags struct {
	mode                        string
	maxAttempts                 int
	lease, backoff, retryWithin time.Duration
	verbose                     bool
}

func (o *attemptFlags) add(f *pflag.FlagSet) {
	f.StringVar(&o.mode, "mode", "at-least-once", "what to do with an attempt that failed or was killed: at-least-once (run it again) or at-most-once (never run twice; leave it unknown for 'idem resolve')")
	f.DurationVar(&o.lease, "lease", idem.DefaultLease, "how long a killed run keeps its period before another run may take it over (a run killed on this host is taken over at once); a live run renews it every third of it")
	f.IntVar(&o.maxAttempts, "max-attempts", idem.DefaultMaxAttempts, "attempts of a failing period (in this run and later ones) before it is parked until 'idem reset'")
	f.DurationVar(&o.backoff, "backoff", time.Second, "wait before retrying a failed attempt; doubles each time (each wait random between half of it and all of it), at most 10m or this value if larger")
	f.DurationVar(&o.retryWithin, "retry-within", idem.DefaultRetryWithin, "retry a failed attempt in this run only if the retry starts within this long of the run's start; a later retry is left to the next run (0: one attempt per run)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "report every period on stderr, not only failures (by default a successful run prints nothing, so cron sends no mail)")
}

// options checks the flags and returns idem's clock ($IDEM_NOW, or the
// system's), the mode, the options of every call (lease, backoff, clock,
// logger) and the attempt bound.
func (o attemptFlags) options(stderr io.Writer) (clk idem.Clock, mode idem.Option, common []idem.Option, attempt idem.Option, err error) {
	if clk, err = clock(); err != nil {
		return nil, nil, nil, nil, err
	}
	switch o.mode {
	case "at-least-once", "atleastonce":
		mode = idem.AtLeastOnce()
	case "at-most-once", "atmostonce":
		mode = idem.AtMostOnce()
	default:
		return nil, nil, nil, nil, usageError(fmt.Errorf("--mode %q: use at-least-once or at-most-once", o.mode))
	}
	if o.lease < idem.MinLease {
		return nil, nil, nil, nil, usageError(fmt.Errorf("--lease %v: must be at least %v", o.lease, idem.MinLease))
	}
	if o.maxAttempts < 1 {
		return nil, nil, nil, nil, usageError(fmt.Errorf("--max-attempts %d: must be at least 1", o.maxAttempts))
	}
	if o.backoff < 0 {
		return nil, nil, nil, nil, usageError(fmt.Errorf("--backoff %v: must not be negative", o.backoff))
	}
	if o.retryWithin < 0 {
		return nil, nil, nil, nil, usageError(fmt.Errorf("--retry-within %v: must not be negative", o.retryWithin))
	}
	growth := idem.Exponential(o.backoff)
	if o.backoff == 0 {
		growth = idem.Constant(0) // --backoff 0: retry at once
	}
	common = []idem.Option{
		idem.WithLease(o.lease),
		idem.WithBackoff(idem.MaxAttempts(o.maxAttempts,
			idem.EqualJitter(idem.Capped(max(idem.DefaultBackoffCap, o.backoff), growth)))),
		idem.WithClock(clk)}
	if o.verbose {
		// Retried failures and lost leases, which the summary lines do not show.
		common = append(common, idem.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	}
	return clk, mode, common, idem.RetryWithin(o.retryWithin), nil
}
