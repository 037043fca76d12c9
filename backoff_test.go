package idem

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestExponentialCapAndMax(t *testing.T) {
	b := WithMaxAttempts(5, WithCap(10*time.Second, Exponential(time.Second)))
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
	uncapped := WithCap(10*time.Second, Exponential(time.Second))
	if got, _ := uncapped.Next(5); got != 10*time.Second {
		t.Fatalf("capped Next(5) = %v, want 10s", got)
	}
	if got, _ := Exponential(time.Second).Next(200); got != math.MaxInt64 {
		t.Fatalf("Next(200) = %v, want saturation", got)
	}
}

func TestFullJitterBounds(t *testing.T) {
	b := WithFullJitter(WithCap(time.Minute, Exponential(time.Second)))
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
	b := DefaultBackoff()
	for n := 1; n <= 4; n++ {
		d, ok := b.Next(n)
		if want := (time.Second << (n - 1)) / 2; !ok || d != want {
			t.Fatalf("Next(%d) = %v, want %v", n, d, want)
		}
	}
	if _, ok := b.Next(5); ok {
		t.Fatal("DefaultBackoff: want to give up after 5 attempts")
	}
	if len(asked) != 4 || asked[3] != 8*time.Second {
		t.Fatalf("jitter asked for %v", asked)
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	t.Run("succeeds", func(t *testing.T) {
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
		calls := 0
		err := Retry(ctx, WithMaxAttempts(4, Constant(0)), func(context.Context) error { calls++; return boom })
		if !errors.Is(err, ErrGaveUp) || !errors.Is(err, boom) || calls != 4 {
			t.Fatalf("err %v, calls %d", err, calls)
		}
	})
	t.Run("permanent", func(t *testing.T) {
		calls := 0
		err := Retry(ctx, Constant(0), func(context.Context) error { calls++; return Permanent(boom) })
		if !errors.Is(err, boom) || errors.Is(err, ErrGaveUp) || calls != 1 {
			t.Fatalf("err %v, calls %d", err, calls)
		}
	})
	t.Run("context cancelled during sleep", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		calls := 0
		err := Retry(ctx, Constant(time.Hour), func(context.Context) error { calls++; cancel(); return boom })
		if !errors.Is(err, context.Canceled) || !errors.Is(err, boom) || calls != 1 {
			t.Fatalf("err %v, calls %d", err, calls)
		}
	})
}
