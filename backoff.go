package idem

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff decides how long to wait after a failure, and when to give up.
//
// It is a function of the failure count alone, not of hidden state, so that
// Run can persist the count in the store and honour the same backoff across
// separate processes: a cron that fires every minute does not hammer a
// failing downstream. There is no hidden elapsed-time limit; bound the number
// of attempts with [MaxAttempts] and the wait with [Capped].
type Backoff interface {
	// Next returns the delay before the next attempt after n consecutive
	// failures (n >= 1), or ok == false to give up.
	Next(n int) (delay time.Duration, ok bool)
}

// BackoffFunc adapts a function to [Backoff].
type BackoffFunc func(n int) (time.Duration, bool)

// Next calls f(n).
func (f BackoffFunc) Next(n int) (time.Duration, bool) { return f(n) }

// badBackoff is what a Backoff constructor or decorator returns for a bad
// value: [WithBackoff] and [Retry] refuse it with an error matching
// [ErrInvalidOption]. Its Next gives up at once.
type badBackoff struct{ why string }

func (b badBackoff) Next(int) (time.Duration, bool) { return 0, false }

// CheckBackoff returns why b cannot be used (nil, or made by a Backoff
// constructor from a bad value), or nil: how an option that takes a
// Backoff (WithBackoff, outbox.WithBackoff) refuses it at once.
func CheckBackoff(b Backoff) error {
	switch b := b.(type) {
	case nil:
		return errors.New("no backoff (nil)")
	case badBackoff:
		return errors.New(b.why)
	case BackoffFunc:
		if b == nil {
			return errors.New("no backoff (a nil BackoffFunc)")
		}
	}
	return nil
}

// inner returns b, or, if b cannot be used, the badBackoff that says so
// in the decorator named by what.
func inner(what string, b Backoff) (Backoff, bool) {
	if err := CheckBackoff(b); err != nil {
		if bb, ok := b.(badBackoff); ok {
			return bb, false
		}
		return badBackoff{what + ": " + err.Error()}, false
	}
	return b, true
}

// Constant waits d after every failure and never gives up. A negative d
// makes a Backoff that [WithBackoff] refuses.
func Constant(d time.Duration) Backoff {
	if d < 0 {
		return badBackoff{fmt.Sprintf("Constant(%v): the delay must not be negative", d)}
	}
	return BackoffFunc(func(int) (time.Duration, bool) { return d, true })
}

// Exponential waits base, 2·base, 4·base, ... after the 1st, 2nd, 3rd failure,
// saturating at the largest Duration. It never gives up and has no jitter:
// wrap it with [FullJitter], [Capped] and [MaxAttempts]. A base
// that is not positive makes a Backoff that [WithBackoff] refuses.
func Exponential(base time.Duration) Backoff {
	if base <= 0 {
		return badBackoff{fmt.Sprintf("Exponential(%v): the base delay must be positive", base)}
	}
	return BackoffFunc(func(n int) (time.Duration, bool) {
		if n < 1 {
			n = 1
		}
		shift := n - 1
		if shift >= 62 || base > math.MaxInt64>>shift {
			return math.MaxInt64, true
		}
		return base << shift, true
	})
}

// Capped limits every delay of b to at most max. A max that is not
// positive, or a b that cannot be used, makes a Backoff that [WithBackoff]
// refuses.
func Capped(max time.Duration, b Backoff) Backoff {
	if max <= 0 {
		return badBackoff{fmt.Sprintf("Capped(%v): the cap must be positive", max)}
	}
	b, ok := inner(fmt.Sprintf("Capped(%v)", max), b)
	if !ok {
		return b
	}
	return BackoffFunc(func(n int) (time.Duration, bool) {
		d, ok := b.Next(n)
		return min(d, max), ok
	})
}

// MaxAttempts gives up once n attempts have failed: the n-th failure
// parks the key. An n below 1, or a b that cannot be used, makes a Backoff
// that [WithBackoff] refuses.
func MaxAttempts(n int, b Backoff) Backoff {
	if n < 1 {
		return badBackoff{fmt.Sprintf("MaxAttempts(%d): at least one attempt is needed", n)}
	}
	b, ok := inner(fmt.Sprintf("MaxAttempts(%d)", n), b)
	if !ok {
		return b
	}
	return BackoffFunc(func(failures int) (time.Duration, bool) {
		if failures >= n {
			return 0, false
		}
		return b.Next(failures)
	})
}

// jitter returns a uniform random duration in [0, d]. Tests replace it.
var jitter = func(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d == math.MaxInt64 {
		return time.Duration(rand.Int64N(math.MaxInt64))
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// FullJitter replaces each delay d of b by a uniform random delay in
// [0, d] ("full jitter"), so that many clients failing together do not retry
// together. A delay may come out near zero, so the sum of the delays has no
// lower bound: use [EqualJitter] when the backoff must also bound how
// soon the attempts run out.
//
// A b that cannot be used makes a Backoff that [WithBackoff] refuses.
func FullJitter(b Backoff) Backoff {
	b, ok := inner("FullJitter", b)
	if !ok {
		return b
	}
	return BackoffFunc(func(n int) (time.Duration, bool) {
		d, ok := b.Next(n)
		if !ok {
			return 0, false
		}
		return jitter(d), true
	})
}

// EqualJitter replaces each delay d of b by a uniform random delay in
// [d/2, d] ("equal jitter"): clients failing together still spread out, and
// every delay is at least half of b's, so the sum of the delays before b
// gives up is at least half of b's sum. [DefaultBackoff] uses it for that
// bound. A b that cannot be used makes a Backoff that [WithBackoff]
// refuses.
func EqualJitter(b Backoff) Backoff {
	b, ok := inner("EqualJitter", b)
	if !ok {
		return b
	}
	return BackoffFunc(func(n int) (time.Duration, bool) {
		d, ok := b.Next(n)
		if !ok {
			return 0, false
		}
		half := d / 2
		return half + jitter(d-half), true
	})
}

// Defaults of [DefaultBackoff].
const (
	// DefaultMaxAttempts is how many failed attempts DefaultBackoff allows
	// before it parks the key.
	DefaultMaxAttempts = 16
	// DefaultBackoffCap is the longest wait of DefaultBackoff.
	DefaultBackoffCap = 10 * time.Minute
)

// DefaultBackoff is what Run uses unless told otherwise: 1 s, 2 s, 4 s, ...
// doubling, capped at 10 minutes, with equal jitter (each wait uniform in
// [d/2, d]), giving up after 16 failed attempts.
//
// So a failing key is parked only after at least 33 min 31.5 s of failing:
// the 15 waits between its 16 attempts are at least half of 1 s + 2 s + ...
// + 512 s + 5 × 10 min. A downstream outage shorter than that heals by
// itself, across later triggers: the failure count and the next allowed time
// are kept in the store, and [RetryWithin] keeps one call from waiting them
// out in-process. At most, the waits add up to 67 min 3 s.
func DefaultBackoff() Backoff {
	return MaxAttempts(DefaultMaxAttempts, EqualJitter(Capped(DefaultBackoffCap, Exponential(time.Second))))
}

// Retry calls fn until it succeeds, returns a [Permanent] error, b gives up,
// or ctx ends, sleeping b's delay between attempts. It keeps no state beyond
// the call: to remember attempts across processes, use Run.
//
// The error it returns wraps fn's last error; when b gave up it also matches
// [ErrParked] (Retry keeps no key, but its work is given up as a Run's key
// would be parked). A b that cannot be used (nil, or made from a bad value) is an
// error matching [ErrInvalidOption], returned before fn runs.
func Retry(ctx context.Context, b Backoff, fn func(context.Context) error) error {
	if err := CheckBackoff(b); err != nil {
		return invalidOption("Retry: %s", err)
	}
	return retry(ctx, systemClock{}, b, fn)
}

func retry(ctx context.Context, c Clock, b Backoff, fn func(context.Context) error) error {
	for n := 1; ; n++ {
		err := fn(ctx)
		if err == nil || IsPermanent(err) {
			return err
		}
		d, ok := b.Next(n)
		if !ok {
			return &retryGaveUp{attempts: n, err: err}
		}
		if serr := sleep(ctx, c, d); serr != nil {
			return fmt.Errorf("idem: retry stopped after %d attempts: %w (last error: %w)", n, serr, err)
		}
	}
}

// retryGaveUp is Retry's error when its backoff gave up.
type retryGaveUp struct {
	attempts int
	err      error // fn's last error
}

func (e *retryGaveUp) Error() string {
	return fmt.Sprintf("idem: retry: the backoff gave up after %d attempts: %v", e.attempts, e.err)
}

func (e *retryGaveUp) Unwrap() []error { return []error{ErrParked, e.err} }
