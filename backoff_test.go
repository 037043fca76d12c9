package idem

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestExponentialCapAndMax(t *testing.T) {
	t.Parallel()
	b := MaxAttempts(5, Capped(10*time.Second, Exponential(time.Second)))
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		got, ok := b.Next(i + 1)
		if !ok || got != w {
			t.Fatalf("Next(%d) = %v, %v; want %v, true", i+1, got, ok, w)
		}
	}
	if _, ok := b.Next(5); ok {
		t.Fatal("Next(5) of a 5-attempt backoff: want give up")
	}
	uncapped := Capped(10*time.Second, Exponential(time.Second))
	if got, _ := uncapped.Next(5); got != 10*time.Second {
		t.Fatalf("capped Next(5) = %v, want 10s", got)
	}
	if got, _ := Exponential(time.Second).Next(200); got != math.MaxInt64 {
		t.Fatalf("Next(200) = %v, want saturation", got)
	}
}

func TestFullJitterBounds(t *testing.T) {
	t.Parallel()
	b := FullJitter(Capped(time.Minute, Exponential(time.Second)))
	for n := 1; n <= 10; n++ {
		bound := min(time.Minute, time.Second<<(n-1))
		var hi time.Duration
		for range 2000 {
			d, ok := b.Next(n)
			if !ok || d < 0 || d > bound {
				t.Fatalf("Next(%d) = %v, %v; want within [0, %v]", n, d, ok, bound)
			}
			hi = max(hi, d)
		}
		// Full jitter spreads over the whole range, not just near 0 or bound.
		if hi < bound/2 {
			t.Fatalf("Next(%d): largest of 2000 draws %v, want above %v", n, hi, bound/2)
		}
	}
}

func TestFullJitterInjectable(t *testing.T) {
	defer func(old func(time.Duration) time.Duration) { jitter = old }(jitter)
	var asked []time.Duration
	jitter = func(d time.Duration) time.Duration { asked = append(asked, d); return d / 2 }
	b := MaxAttempts(5, FullJitter(Capped(time.Minute, Exponential(time.Second))))
	for n := 1; n <= 4; n++ {
		d, ok := b.Next(n)
		if want := (time.Second << (n - 1)) / 2; !ok || d != want {
			t.Fatalf("Next(%d) = %v, want %v", n, d, want)
		}
	}
	if _, ok := b.Next(5); ok {
		t.Fatal("want to give up after 5 attempts")
	}
	if len(asked) != 4 || asked[3] != 8*time.Second {
		t.Fatalf("jitter asked for %v", asked)
	}
}

func TestEqualJitterBounds(t *testing.T) {
	t.Parallel()
	b := EqualJitter(Capped(time.Minute, Exponential(time.Second)))
	for n := 1; n <= 10; n++ {
		bound := min(time.Minute, time.Second<<(n-1))
		lo, hi := bound, time.Duration(0)
		for range 2000 {
			d, ok := b.Next(n)
			if !ok || d < bound/2 || d > bound {
				t.Fatalf("Next(%d) = %v, %v; want within [%v, %v]", n, d, ok, bound/2, bound)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Spread over the range, not stuck at one end.
		if lo > bound*5/8 || hi < bound*7/8 {
			t.Fatalf("Next(%d): 2000 draws within [%v, %v], want them spread over [%v, %v]", n, lo, hi, bound/2, bound)
		}
	}
	if _, ok := EqualJitter(MaxAttempts(2, Constant(time.Second))).Next(2); ok {
		t.Fatal("EqualJitter does not give up when the wrapped backoff does")
	}
}

// TestDefaultBackoffParksAfterHalfAnHour: DefaultBackoff parks a key only
// after its 16th failed attempt, and its 15 waits add up to at least
// 33 min 31.5 s and at most 67 min 3 s, as its doc says: jitter is replaced
// by its least and its greatest answer.
func TestDefaultBackoffParksAfterHalfAnHour(t *testing.T) {
	defer func(old func(time.Duration) time.Duration) { jitter = old }(jitter)
	for _, c := range []struct {
		name   string
		jitter func(time.Duration) time.Duration
		want   time.Duration
	}{
		{"least", func(time.Duration) time.Duration { return 0 }, 33*time.Minute + 31500*time.Millisecond},
		{"greatest", func(d time.Duration) time.Duration { return d }, 67*time.Minute + 3*time.Second},
	} {
		jitter = c.jitter
		b := DefaultBackoff()
		var sum time.Duration
		for n := 1; n < DefaultMaxAttempts; n++ {
			d, ok := b.Next(n)
			if !ok {
				t.Fatalf("%s: DefaultBackoff gave up after %d failures, want %d", c.name, n, DefaultMaxAttempts)
			}
			if d > DefaultBackoffCap {
				t.Fatalf("%s: Next(%d) = %v, above the cap %v", c.name, n, d, DefaultBackoffCap)
			}
			sum += d
		}
		if _, ok := b.Next(DefaultMaxAttempts); ok {
			t.Fatalf("%s: DefaultBackoff did not give up after %d failures", c.name, DefaultMaxAttempts)
		}
		if sum != c.want {
			t.Fatalf("%s: the waits before parking add up to %v, want %v", c.name, sum, c.want)
		}
	}
	if DefaultMaxAttempts != 16 || DefaultBackoffCap != 10*time.Minute {
		t.Fatalf("defaults %d attempts, cap %v; the doc says 16 and 10m", DefaultMaxAttempts, DefaultBackoffCap)
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("boom")
	t.Run("succeeds", func(t *testing.T) {
		t.Parallel()
		calls := 0
		err := Retry(ctx, Constant(time.Millisecond), func(context.Context) error {
			if calls++; calls < 3 {
				return boom
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("err %v, calls %d", err, calls)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		t.Parallel()
		calls := 0
		err := Retry(ctx, MaxAttempts(4, Constant(0)), func(context.Context) error { calls++; return boom })
		if !errors.Is(err, ErrParked) || !errors.Is(err, boom) || calls != 4 {
			t.Fatalf("err %v, calls %d", err, calls)
		}
	})
	t.Run("permanent", func(t *testing.T) {
		t.Parallel()
		calls := 0
		err := Retry(ctx, Constant(0), func(context.Context) error { calls++; return Permanent(boom) })
		if !errors.Is(err, boom) || errors.Is(err, ErrParked) || calls != 1 {
			t.Fatalf("err %v, calls %d", err, calls)
		}
	})
	t.Run("context cancelled during sleep", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(ctx)
		calls := 0
		err := Retry(ctx, Constant(time.Hour), func(context.Context) error { calls++; cancel(); return boom })
		if !errors.Is(err, context.Canceled) || !errors.Is(err, boom) || calls != 1 {
			t.Fatalf("err %v, calls %d", err, calls)
		}
	})
}
