package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/idemtest"
)

// stalledClock is a fake clock on which no timer ever fires: the process
// is stalled, so the heartbeat never renews the lease. The test moves it
// with Set.
type stalledClock struct{ *idemtest.Clock }

func (stalledClock) After(time.Duration) <-chan time.Time { return make(chan time.Time) }

// stallGuard is the context of a Run on a stalledClock: a wait on that
// clock never ends, so a Run that waits there fails after 10s instead of
// hanging.
func stallGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeoutCause(context.Background(), 10*time.Second,
		errors.New("the Run waited 10s on a clock whose timers never fire"))
	t.Cleanup(cancel)
	return ctx
}

// lockStores are the stores of one host, opened on a directory.
var lockStores = []struct {
	name string
	open func(t testing.TB, dir string) idem.Store
}{
	{"ledger", func(t testing.TB, dir string) idem.Store { return openLedger(t, dir) }},
	{"statefile", func(t testing.TB, dir string) idem.Store { return openState(t, dir) }},
}

// modeOption is the option of a mode by name; "two-phase" asks has.
func modeOption(mode string, has bool) idem.Option {
	switch mode {
	case "at-most-once":
		return idem.AtMostOnce()
	case "two-phase":
		return idem.TwoPhase(func(context.Context, idem.Key) (bool, error) { return has, nil })
	}
	return idem.AtLeastOnce()
}

// TestLeaseRunOutWithoutTakeover: fn stalls past its lease (no timer runs,
// so no renewal) and returns CheckLease's error, and no other attempt took
// the key. The attempt is an ordinary failure that may have had its effect:
// its end is recorded through the fenced Finish by its mode, and nothing of
// it stays held. The next Run, in another process or in this one with
// WaitForTurn, finds the key as the mode left it, never in progress.
func TestLeaseRunOutWithoutTakeover(t *testing.T) {
	t.Parallel()
	const lost = "lease lost: its lease ran out at 2026-10-28T02:01:00Z without a renewal (the process stalled)"
	cases := []struct {
		mode    string
		has     bool
		want    error        // the stalled Run's error matches it (nil: no error)
		outcome idem.Outcome // the stalled Run's
		status  idem.Status  // the record afterwards
		msg     string       // the stalled Run's error text
		next    error        // another process, before the backoff ends
		wait    idem.Outcome // this process with WaitForTurn, after the backoff
	}{
		{"at-least-once", false, idem.ErrBackingOff, idem.BackingOff, idem.StatusFailed,
			"idem: daily_settle/2026-10-27: backing off until 2026-10-28T02:02:01Z after attempt 1 failed: " + lost,
			idem.ErrBackingOff, idem.Ran},
		{"at-most-once", false, idem.ErrUnknownOutcome, idem.Unknown, idem.StatusUnknown,
			"idem: daily_settle/2026-10-27 attempt 1: unknown: " + lost,
			idem.ErrUnknownOutcome, idem.Unknown},
		{"two-phase", false, idem.ErrBackingOff, idem.BackingOff, idem.StatusFailed,
			"idem: daily_settle/2026-10-27: backing off until 2026-10-28T02:02:01Z after attempt 1 failed: " + lost,
			idem.ErrBackingOff, idem.Ran},
		{"two-phase", true, nil, idem.Recovered, idem.StatusDone, "", nil, idem.AlreadyDone},
	}
	for _, st := range lockStores {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%s/has=%v", st.name, c.mode, c.has), func(t *testing.T) {
				t.Parallel()
				opts := func(clk idem.Clock) []idem.Option {
					return []idem.Option{idem.WithClock(clk), modeOption(c.mode, c.has),
						idem.WithBackoff(idem.Constant(time.Minute))}
				}
				// The next trigger, in another process, before the backoff ends.
				// (In the child, t.Fatalf makes it exit non-zero.)
				child := func(dir string) {
					s := st.open(t, dir)
					var res idem.Result
					ran := false
					err := idem.RunOn(context.Background(), s, key, func(context.Context) error { ran = true; return nil },
						append(opts(idemtest.NewClock(t0.Add(idem.DefaultLease+2*time.Second))), idem.OneAttempt(), idem.ReportTo(&res))...)
					if ran || errors.Is(err, idem.ErrInProgress) || (c.next == nil && err != nil) || (c.next != nil && !errors.Is(err, c.next)) {
						t.Fatalf("another process, after the stalled attempt: %v (%s), ran fn: %v; want %v", err, res.Outcome, ran, c.next)
					}
				}
				if idemtest.IsChild(t) {
					idemtest.Start(t, "", child)
				}
				dir := t.TempDir()
				s := st.open(t, dir)
				clk := stalledClock{idemtest.NewClock(t0)}
				ran := 0
				var res idem.Result
				err := idem.RunOn(stallGuard(t), s, key, func(ctx context.Context) error {
					ran++
					clk.Set(t0.Add(idem.DefaultLease + time.Second)) // the process stalls past its lease
					return idem.CheckLease(ctx)
				}, append(opts(clk), idem.OneAttempt(), idem.ReportTo(&res))...)
				if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) || res.Outcome != c.outcome || ran != 1 {
					t.Fatalf("the stalled Run: %v (%s), fn ran %d times; want %v (%s), once", err, res.Outcome, ran, c.want, c.outcome)
				}
				if errors.Is(err, idem.ErrLeaseLost) {
					t.Errorf("the stalled Run matches ErrLeaseLost, but no newer attempt took the key: %v", err)
				}
				if err != nil && err.Error() != c.msg {
					t.Errorf("the stalled Run's error:\n got %s\nwant %s", err, c.msg)
				}
				rec := mustLookup(t, s, key)
				if rec.Status != c.status || rec.Attempt != 1 {
					t.Fatalf("the record after the stalled attempt: %+v; want %s by attempt 1", rec, c.status)
				}
				if c.status != idem.StatusDone && rec.LastError != lost {
					t.Errorf("the record's last error %q, want %q", rec.LastError, lost)
				}

				if e := idemtest.Fork(t, dir, child); e.Code != 0 || e.Killed {
					t.Fatalf("the child process: %+v", e)
				}

				// This process, with WaitForTurn, once the backoff is over.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				res = idem.Result{}
				err = idem.RunOn(ctx, s, key, func(context.Context) error { ran++; return nil },
					append(opts(idemtest.NewAutoClock(t0.Add(10*time.Minute))), idem.WaitForTurn(), idem.ReportTo(&res))...)
				if ctx.Err() != nil {
					t.Fatalf("a WaitForTurn Run in this process was still waiting for the key after 10s: %v (%s)", err, res.Outcome)
				}
				if res.Outcome != c.wait || (c.wait == idem.Unknown) != errors.Is(err, idem.ErrUnknownOutcome) {
					t.Fatalf("a WaitForTurn Run in this process: %v (%s), want %s", err, res.Outcome, c.wait)
				}
			})
		}
	}
}

// TestLeaseLostMessages: the texts of lease-lost errors say what happened,
// a stall or a takeover, and never repeat their own prefix.
func TestLeaseLostMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	later := idemtest.NewClock(t0.Add(idem.DefaultLease + time.Second)) // another process, past A's lease
	check := func(t *testing.T, what string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error, want %q", what, want)
		}
		if got := err.Error(); got != want {
			t.Errorf("%s:\n got %s\nwant %s", what, got, want)
		}
		if msg := err.Error(); strings.Count(msg, "idem: ") != 1 || strings.Count(msg, "lease lost") > 1 {
			t.Errorf("%s repeats its prefix: %s", what, msg)
		}
	}
	if idem.ErrLeaseLost.Error() != "idem: lease lost" {
		t.Errorf("ErrLeaseLost = %q, want %q", idem.ErrLeaseLost, "idem: lease lost")
	}

	t.Run("stall", func(t *testing.T) {
		clk := stalledClock{idemtest.NewClock(t0)}
		l := openLedger(t, t.TempDir(), idem.WithClock(clk))
		var inFn error
		err := l.Run(stallGuard(t), key, func(ctx context.Context) error {
			clk.Set(t0.Add(idem.DefaultLease + time.Second))
			inFn = idem.CheckLease(ctx)
			return inFn
		}, idem.OneAttempt())
		check(t, "CheckLease after a stall", inFn,
			"idem: lease lost: attempt 1 of daily_settle/2026-10-27: its lease ran out at 2026-10-28T02:01:00Z without a renewal (the process stalled)")
		if !errors.Is(inFn, idem.ErrLeaseLost) {
			t.Errorf("CheckLease's error does not match ErrLeaseLost: %v", inFn)
		}
		if !errors.Is(err, idem.ErrBackingOff) {
			t.Errorf("Run: %v, want ErrBackingOff", err)
		}
	})

	t.Run("renewal finds a takeover", func(t *testing.T) {
		dir := t.TempDir()
		clkA := idemtest.NewClock(t0)
		a := openLedger(t, dir, idem.WithClock(clkA))
		b := openLedger(t, dir, idem.WithClock(later))
		started := make(chan struct{})
		aErr := make(chan error, 1)
		var cause, inFn error
		go func() {
			aErr <- a.Run(ctx, key, func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				cause, inFn = context.Cause(ctx), idem.CheckLease(ctx)
				return ctx.Err()
			})
		}()
		<-started
		if err := b.Run(ctx, key, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("B: %v", err)
		}
		clkA.BlockUntil(1)
		clkA.Advance(idem.DefaultLease / 3) // A's heartbeat renews, and finds attempt 2
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		var err error
		select {
		case err = <-aErr:
		case <-timer.C:
			t.Fatal("A's Run did not return within 10s of its heartbeat finding attempt 2")
		}
		want := "idem: lease lost: attempt 1 of daily_settle/2026-10-27 was taken over by a newer attempt"
		check(t, "fn's context cause", cause, want)
		check(t, "CheckLease after the takeover", inFn, want)
		check(t, "Run", err, "idem: daily_settle/2026-10-27 attempt 1: lease_lost: taken over by a newer attempt (found by a lease renewal)")
		if !errors.Is(err, idem.ErrLeaseLost) || !errors.Is(cause, idem.ErrLeaseLost) {
			t.Errorf("the errors do not match ErrLeaseLost: %v; %v", err, cause)
		}
	})

	t.Run("done mark refused", func(t *testing.T) {
		dir := t.TempDir()
		a := openLedger(t, dir, idem.WithClock(idemtest.NewClock(t0)))
		b := openLedger(t, dir, idem.WithClock(later))
		err := a.Run(ctx, key, func(context.Context) error {
			// B is another process: its context is not derived from A's fn.
			return b.Run(ctx, key, func(context.Context) error { return nil })
		})
		check(t, "Run", err, "idem: daily_settle/2026-10-27 attempt 1: lease_lost: taken over by a newer attempt: its done mark was refused")
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("does not match ErrLeaseLost: %v", err)
		}
	})

	for _, c := range []struct{ mode, mark string }{{"at-least-once", "failure record"}, {"at-most-once", "unknown mark"}} {
		t.Run("stall and takeover/"+c.mode, func(t *testing.T) {
			dir := t.TempDir()
			clk := stalledClock{idemtest.NewClock(t0)}
			a := openLedger(t, dir, idem.WithClock(clk))
			b := openLedger(t, dir, idem.WithClock(later))
			err := a.Run(stallGuard(t), key, func(ctx context.Context) error {
				// A stalls; meanwhile B takes the key over and completes it.
				clk.Set(t0.Add(idem.DefaultLease + time.Second))
				if err := b.Run(context.Background(), key, func(context.Context) error { return nil }); err != nil {
					t.Errorf("B: %v", err)
				}
				return idem.CheckLease(ctx)
			}, modeOption(c.mode, false))
			check(t, "Run", err, "idem: daily_settle/2026-10-27 attempt 1: lease_lost: its lease ran out at 2026-10-28T02:01:00Z without a renewal (the process stalled) and a newer attempt took the key over: its "+c.mark+" was refused")
			var ierr *idem.Error
			if !errors.Is(err, idem.ErrLeaseLost) || !errors.As(err, &ierr) || ierr.Outcome != idem.LeaseLost {
				t.Errorf("want an *Error of outcome LeaseLost: %#v", err)
			}
			if rec := mustLookup(t, a, key); rec.Status != idem.StatusDone || rec.Attempt != 2 {
				t.Errorf("record %+v, want done by attempt 2", rec)
			}
		})
	}
}

// flakyFinish wraps a store: its next fail Finish calls fail with err,
// before reaching the store, or (answerLost) after the store recorded the
// end, as when a connection drops before the answer comes.
type flakyFinish struct {
	idemstore.Store
	err        error
	answerLost bool

	mu    sync.Mutex
	fail  int
	calls []idem.Status
}

func (f *flakyFinish) Finish(ctx context.Context, key idem.Key, attempt int64, end idemstore.End) error {
	f.mu.Lock()
	failing := f.fail > 0
	if failing {
		f.fail--
	}
	f.calls = append(f.calls, end.Status)
	f.mu.Unlock()
	if !failing {
		return f.Store.Finish(ctx, key, attempt, end)
	}
	if f.answerLost {
		if err := f.Store.Finish(ctx, key, attempt, end); err != nil {
			return err
		}
	}
	return f.err
}

func (f *flakyFinish) finishes() []idem.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]idem.Status(nil), f.calls...)
}

// logRecorder is a slog.Handler that keeps the messages logged, and calls
// onRetry (once) when Run logs that it retries recording an attempt's end.
type logRecorder struct {
	mu      sync.Mutex
	msgs    []string
	onRetry func()
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	h.mu.Lock()
	h.msgs = append(h.msgs, msg)
	retry := strings.HasPrefix(r.Message, "idem: recording the attempt's end failed; retrying")
	f := h.onRetry
	if retry {
		h.onRetry = nil
	}
	h.mu.Unlock()
	if retry && f != nil {
		f()
	}
	return nil
}

func (h *logRecorder) retries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range h.msgs {
		if strings.HasPrefix(m, "idem: recording the attempt's end failed; retrying") {
			out = append(out, m)
		}
	}
	return out
}

// TestFinishRetriedAfterTransientError: a Finish that fails on a transient
// store error is retried, for every end an attempt can have, so a done
// mark is not lost to it (fn does not run again, AtMostOnce does not park
// the key as unknown); a Finish whose first try was recorded though its
// answer was lost is not taken for a lost lease; and the retries stop at
// the attempt's lease end.
func TestFinishRetriedAfterTransientError(t *testing.T) {
	t.Parallel()
	injected := errors.New("injected: connection reset by peer")
	bad := errors.New("account closed")
	cases := []struct {
		name       string
		opts       []idem.Option
		fn         func() error
		answerLost bool
		want       error // Run's error matches it; nil: no error
		outcome    idem.Outcome
		status     idem.Status
	}{
		{"done/at-least-once", []idem.Option{idem.AtLeastOnce()}, func() error { return nil }, false, nil, idem.Ran, idem.StatusDone},
		{"done/at-most-once", []idem.Option{idem.AtMostOnce()}, func() error { return nil }, false, nil, idem.Ran, idem.StatusDone},
		{"done/answer lost", []idem.Option{idem.AtLeastOnce()}, func() error { return nil }, true, nil, idem.Ran, idem.StatusDone},
		{"failed", []idem.Option{idem.OneAttempt()}, func() error { return errors.New("down") }, false, idem.ErrBackingOff, idem.BackingOff, idem.StatusFailed},
		{"unknown", []idem.Option{idem.AtMostOnce()}, func() error { return errors.New("timeout") }, false, idem.ErrUnknownOutcome, idem.Unknown, idem.StatusUnknown},
		{"parked", nil, func() error { return idem.Permanent(bad) }, false, idem.ErrParked, idem.Parked, idem.StatusParked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := idemtest.NewAutoClock(t0)
			s := &flakyFinish{Store: store(t, openLedger(t, t.TempDir())), err: injected, fail: 1, answerLost: c.answerLost}
			logs := &logRecorder{}
			ran := 0
			var res idem.Result
			err := idem.RunOn(context.Background(), s, key, func(context.Context) error { ran++; return c.fn() },
				append(c.opts, idem.WithClock(clk), idem.WithLogger(slog.New(logs)), idem.ReportTo(&res))...)
			if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) || res.Outcome != c.outcome || ran != 1 {
				t.Fatalf("Run: %v (%s), fn ran %d times; want %v (%s), once", err, res.Outcome, ran, c.want, c.outcome)
			}
			if rec := mustLookup(t, s, key); rec.Status != c.status || rec.Attempt != 1 {
				t.Fatalf("record %+v, want %s by attempt 1", rec, c.status)
			}
			if got := s.finishes(); len(got) != 2 || got[0] != c.status || got[1] != c.status {
				t.Errorf("Finish calls %v, want the %s end twice", got, c.status)
			}
			if r := logs.retries(); len(r) != 1 || !strings.Contains(r[0], injected.Error()) {
				t.Errorf("retries logged: %q, want one naming the injected error", r)
			}
		})
	}

	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name  string
			lease time.Duration
			tries int // of each end
		}{
			{"by the number of tries", idem.DefaultLease, 5},
			{"by the lease's end", 3 * time.Millisecond, 1}, // the first retry (after 50ms) would start past it
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				s := &flakyFinish{Store: store(t, openLedger(t, t.TempDir())), err: injected, fail: 1 << 30}
				ran := 0
				err := idem.RunOn(context.Background(), s, key, func(context.Context) error { ran++; return nil },
					idem.WithClock(idemtest.NewAutoClock(t0)), idem.WithLease(c.lease))
				var ierr *idem.Error
				if !errors.Is(err, injected) || !errors.As(err, &ierr) || ierr.Outcome != idem.Failed || ran != 1 {
					t.Fatalf("Run: %v, fn ran %d times; want a failure wrapping the injected error, once", err, ran)
				}
				var want []idem.Status
				for _, st := range []idem.Status{idem.StatusDone, idem.StatusFailed} {
					for range c.tries {
						want = append(want, st)
					}
				}
				if got := s.finishes(); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("Finish calls %v, want %v", got, want)
				}
			})
		}
	})
}

// TestStateFileFinishWriteFails: the state file's write of an attempt's end
// fails as on a full disk (the temp file's write returns EFBIG). Once: the
// state file keeps the job's lock, Run writes the end again, and the key is
// done, fn having run once. For good: Run returns the write error (not
// ErrLeaseLost), and the job's lock is released, so the next Run in this
// process is not in progress.
func TestStateFileFinishWriteFails(t *testing.T) {
	needFileSizeLimit(t)
	ctx := context.Background()
	t.Run("once", func(t *testing.T) {
		s := openState(t, t.TempDir())
		var restore func()
		logs := &logRecorder{onRetry: func() { restore() }} // the disk has room again before the retry
		ran := 0
		var res idem.Result
		err := s.Run(ctx, key, func(context.Context) error {
			ran++
			restore = limitFileSize(t, 0)
			return nil
		}, idem.WithClock(idemtest.NewAutoClock(t0)), idem.WithLogger(slog.New(logs)), idem.ReportTo(&res))
		if restore != nil {
			restore()
		}
		if err != nil || res.Outcome != idem.Ran || ran != 1 {
			t.Fatalf("Run: %v (%s), fn ran %d times; want ran once", err, res.Outcome, ran)
		}
		if rec := mustLookup(t, s, key); rec.Status != idem.StatusDone || rec.Attempt != 1 {
			t.Fatalf("record %+v, want done by attempt 1", rec)
		}
		if r := logs.retries(); len(r) != 1 || !strings.Contains(r[0], "file too large") {
			t.Fatalf("retries logged: %q, want one after a write that failed with EFBIG", r)
		}
	})
	t.Run("for good", func(t *testing.T) {
		s := openState(t, t.TempDir())
		var restore func()
		ran := 0
		var res idem.Result
		err := s.Run(ctx, key, func(context.Context) error {
			ran++
			restore = limitFileSize(t, 0)
			return nil
		}, idem.WithClock(idemtest.NewAutoClock(t0)), idem.ReportTo(&res))
		if restore != nil {
			restore()
		}
		if !errors.Is(err, syscall.EFBIG) || errors.Is(err, idem.ErrLeaseLost) || res.Outcome != idem.Failed || ran != 1 {
			t.Fatalf("Run on a full disk: %v (%s), fn ran %d times; want the write error (EFBIG), not ErrLeaseLost", err, res.Outcome, ran)
		}
		res = idem.Result{}
		err = s.Run(ctx, key, func(context.Context) error { ran++; return nil }, idem.WithClock(idemtest.NewAutoClock(t0)), idem.ReportTo(&res))
		if err != nil || res.Outcome != idem.Ran || ran != 2 {
			t.Fatalf("the next Run in this process: %v (%s); want it to run (the job's lock released)", err, res.Outcome)
		}
	})
}

// triggerClock is a fake clock for runs driven by triggers: while no
// attempt holds a key (between attempts: backoff sleeps, polls) a wait
// moves the clock forward at once; while one holds it, fn takes no time,
// so the clock stands still and the heartbeat's waits never fire.
// triggerStore tells it when an attempt holds its key.
type triggerClock struct {
	mu      sync.Mutex
	now     time.Time
	holding bool
}

func (c *triggerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *triggerClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if c.holding {
		return ch
	}
	c.now = c.now.Add(max(d, 0))
	ch <- c.now
	return ch
}

func (c *triggerClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *triggerClock) hold(h bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = h
}

func (c *triggerClock) held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holding
}

// triggerStore is a store that tells its triggerClock when an attempt
// holds a key: from a claim that acquired it to the attempt's Finish (the
// heartbeat has stopped by then).
type triggerStore struct {
	idemstore.CatchUpStore
	clk *triggerClock
}

func (s triggerStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.Claim, error) {
	c, err := s.CatchUpStore.Claim(ctx, req)
	if err == nil && c.State == idemstore.ClaimAcquired {
		s.clk.hold(true)
	}
	return c, err
}

func (s triggerStore) Finish(ctx context.Context, key idem.Key, attempt int64, end idemstore.End) error {
	s.clk.hold(false)
	return s.CatchUpStore.Finish(ctx, key, attempt, end)
}

// TestRetryWithin: one call retries in-process only while the retry starts
// within RetryWithin of the call's start (default one minute), then records
// the failure and returns ErrBackingOff; OneAttempt is RetryWithin(0);
// WaitForTurn alone retries until the backoff gives up.
func TestRetryWithin(t *testing.T) {
	t.Parallel()
	down := errors.New("downstream down")
	every25s := idem.WithBackoff(idem.Constant(25 * time.Second)) // never gives up
	for _, c := range []struct {
		name     string
		opts     []idem.Option
		calls    int
		want     error
		notAfter time.Duration // of the call's start, on the clock, when it returns
	}{
		{"default", []idem.Option{every25s}, 3, idem.ErrBackingOff, 50 * time.Second}, // at 0s, 25s, 50s; 75s is past the minute
		{"RetryWithin(2m)", []idem.Option{every25s, idem.RetryWithin(2 * time.Minute)}, 5, idem.ErrBackingOff, 100 * time.Second},
		{"RetryWithin(0)", []idem.Option{every25s, idem.RetryWithin(0)}, 1, idem.ErrBackingOff, 0},
		{"OneAttempt", []idem.Option{every25s, idem.OneAttempt()}, 1, idem.ErrBackingOff, 0},
		{"WaitForTurn", []idem.Option{idem.WithBackoff(idem.MaxAttempts(6, idem.Constant(25*time.Second))), idem.WaitForTurn()}, 6, idem.ErrParked, 125 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := &triggerClock{now: t0}
			s := triggerStore{store(t, openLedger(t, t.TempDir())), clk}
			calls := 0
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a Run that never stops retrying
			defer cancel()
			err := idem.RunOn(ctx, s, key, func(context.Context) error { calls++; return down },
				append(c.opts, idem.WithClock(clk))...)
			if ctx.Err() != nil {
				t.Fatalf("the Run was still retrying after 10s: %d attempts, %v", calls, err)
			}
			if !errors.Is(err, c.want) || !errors.Is(err, down) || calls != c.calls {
				t.Fatalf("Run: %v, fn ran %d times; want %v after %d", err, calls, c.want, c.calls)
			}
			if took := clk.Now().Sub(t0); took != c.notAfter {
				t.Fatalf("the call took %v on the clock, want %v", took, c.notAfter)
			}
			rec := mustLookup(t, s, key)
			var ierr *idem.Error
			if errors.Is(err, idem.ErrBackingOff) && (!errors.As(err, &ierr) || !ierr.NotBefore.Equal(rec.NotBefore) ||
				ierr.Attempt != int64(c.calls) || rec.Status != idem.StatusFailed || rec.Failures != c.calls ||
				!rec.NotBefore.Equal(t0.Add(c.notAfter+25*time.Second))) {
				t.Fatalf("error %#v, record %+v: want failed %d times, retry allowed 25s after the last", err, rec, c.calls)
			}
		})
	}
	if idem.DefaultRetryWithin != time.Minute {
		t.Fatalf("DefaultRetryWithin = %v, the doc says one minute", idem.DefaultRetryWithin)
	}
}

// TestInvalidOptionWritesNothing: a negative RetryWithin is refused with
// ErrInvalidOption by Run, CatchUp and Each before they write anything.
func TestInvalidOptionWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir(), idem.WithClock(idemtest.NewClock(day(10))))
	bad := idem.RetryWithin(-time.Second)
	const want = "idem: invalid option: RetryWithin(-1s): the bound must not be negative"
	ran := false
	err := l.Run(ctx, key, func(context.Context) error { ran = true; return nil }, bad)
	if !errors.Is(err, idem.ErrInvalidOption) || err.Error() != want || ran {
		t.Fatalf("Run: %v, ran %v; want %q", err, ran, want)
	}
	// CatchUpLatest would record the older periods as skipped first.
	_, err = idem.CatchUp(ctx, l, "j", daily, func(context.Context, idem.Period) error { ran = true; return nil },
		idem.CatchUpLatest(), idem.Since(day(1)), bad)
	if !errors.Is(err, idem.ErrInvalidOption) || ran {
		t.Fatalf("CatchUp: %v, ran %v", err, ran)
	}
	_, err = idem.Each(ctx, l, key, idem.Items(func(yield func(string) bool) { yield("a") }),
		func(context.Context, string) error { ran = true; return nil }, idem.WithWorkers(0))
	if !errors.Is(err, idem.ErrInvalidOption) || ran {
		t.Fatalf("Each: %v, ran %v", err, ran)
	}
	if recs, err := l.List(ctx, idem.Filter{}); err != nil || len(recs) != 0 {
		t.Fatalf("records written: %+v, %v", recs, err)
	}
	if js, err := l.Job(ctx, "j"); err != nil || js.Cursor != "" {
		t.Fatalf("job state written: %+v, %v", js, err)
	}
}

// TestBackingOffSaysWhenAndWhy: a trigger that finds the key backing off
// says until when, after which attempt, and why, as the run that failed
// did: not as a failure of its own.
func TestBackingOffSaysWhenAndWhy(t *testing.T) {
	t.Parallel()
	clk := idemtest.NewClock(t0)
	l := openLedger(t, t.TempDir(), idem.WithClock(clk), idem.WithBackoff(idem.Constant(time.Second)), idem.OneAttempt())
	ctx := context.Background()
	const want = "idem: daily_settle/2026-10-27: backing off until 2026-10-28T02:00:01Z after attempt 1 failed: downstream down"
	calls := 0
	err := l.Run(ctx, key, func(context.Context) error { calls++; return errors.New("downstream down") })
	if !errors.Is(err, idem.ErrBackingOff) || err.Error() != want {
		t.Fatalf("the failing Run:\n got %v\nwant %s", err, want)
	}
	err = l.Run(ctx, key, func(context.Context) error { calls++; return nil }) // the next trigger, too early
	var ierr *idem.Error
	if !errors.Is(err, idem.ErrBackingOff) || !errors.As(err, &ierr) || calls != 1 {
		t.Fatalf("the next trigger: %v, fn ran %d times", err, calls)
	}
	if ierr.Attempt != 1 || !ierr.NotBefore.Equal(t0.Add(time.Second)) || ierr.Err == nil || ierr.Err.Error() != "downstream down" {
		t.Fatalf("the next trigger's error: %+v; want attempt 1, the stored NotBefore and last error", ierr)
	}
	if err.Error() != want {
		t.Fatalf("the next trigger:\n got %s\nwant %s", err, want)
	}
}

// TestOutageHealsUnderDefaults: under the default backoff and RetryWithin, a
// 30-minute outage of the downstream from 02:00 heals without a person: a
// daily job caught up by triggers every 5 minutes (and, once more, every
// hour) keeps failing and backing off, is never parked, each trigger
// returns within the in-process bound, and the first trigger after the
// outage that the backoff allows runs it, once. The waits are random (equal
// jitter); the bounds hold for any, so the scenario runs a few times.
func TestOutageHealsUnderDefaults(t *testing.T) {
	t.Parallel()
	start := t0                           // 2026-10-28 02:00 UTC: the due period is 2026-10-27
	healed := start.Add(30 * time.Minute) // the downstream is back at 02:30
	until := healed.Add(45 * time.Minute) // the last trigger
	down := errors.New("downstream down")
	for _, every := range []time.Duration{5 * time.Minute, time.Hour} {
		t.Run("every "+every.String(), func(t *testing.T) {
			t.Parallel()
			for round := range 5 {
				clk := &triggerClock{now: start}
				s := triggerStore{store(t, openLedger(t, t.TempDir())), clk}
				ok, failed := 0, 0
				fn := func(ctx context.Context, p idem.Period) error {
					if clk.Now().Before(healed) {
						failed++
						return down
					}
					ok++
					return nil
				}
				k := idem.Key{Job: "settle", Period: "2026-10-27"}
				for trig := start; !trig.After(until); trig = trig.Add(every) {
					clk.Set(trig)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a trigger that never stops retrying
					res, err := idem.CatchUp(ctx, s, "settle", daily, fn, idem.WithClock(clk))
					if ctx.Err() != nil {
						t.Fatalf("round %d: the trigger at %s was still retrying after 10s: %v", round, trig.Format("15:04"), err)
					}
					cancel()
					if took := clk.Now().Sub(trig); took > idem.DefaultRetryWithin {
						t.Fatalf("round %d: the trigger at %s took %v on the clock, more than %v", round, trig.Format("15:04"), took, idem.DefaultRetryWithin)
					}
					if clk.held() {
						t.Fatalf("round %d: the trigger at %s returned with an attempt still holding the key", round, trig.Format("15:04"))
					}
					rec := mustLookup(t, s, k)
					switch {
					case rec.Status == idem.StatusParked || errors.Is(err, idem.ErrParked):
						t.Fatalf("round %d: parked at %s after %d failures: %v", round, trig.Format("15:04"), rec.Failures, err)
					case rec.Status == idem.StatusDone:
						if err != nil {
							t.Fatalf("round %d: the trigger at %s: %v", round, trig.Format("15:04"), err)
						}
					case !errors.Is(err, idem.ErrBackingOff) || !strings.HasSuffix(err.Error(), "failed: "+down.Error()) || res.Count(idem.BackingOff) != 1:
						// This trigger's attempt failed, or it found an earlier one's backoff.
						t.Fatalf("round %d: the trigger at %s: %v (%+v), want ErrBackingOff after the downstream's error", round, trig.Format("15:04"), err, res)
					}
				}
				rec := mustLookup(t, s, k)
				if rec.Status != idem.StatusDone || ok != 1 || failed == 0 {
					t.Fatalf("round %d: record %+v, fn succeeded %d times after %d failures; want done, once", round, rec, ok, failed)
				}
				t.Logf("round %d: %d failures, done at attempt %d", round, failed, rec.Attempt)
			}
		})
	}
}

// TestCheckLeaseRefusalNothingHappened: fn that stalls past its lease and
// refuses before any effect, returning NothingHappened(CheckLease(ctx)) as
// CheckLease's doc advises, is a plain failure in every mode: backed off and
// retried, not unknown (AtMostOnce), and the downstream is not asked
// (TwoPhase).
func TestCheckLeaseRefusalNothingHappened(t *testing.T) {
	t.Parallel()
	for _, st := range lockStores {
		for _, mode := range []string{"at-least-once", "at-most-once", "two-phase"} {
			t.Run(st.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				s := st.open(t, t.TempDir())
				clk := stalledClock{idemtest.NewClock(t0)}
				asked := 0
				modeOpt := modeOption(mode, false)
				if mode == "two-phase" {
					modeOpt = idem.TwoPhase(func(context.Context, idem.Key) (bool, error) { asked++; return false, nil })
				}
				var res idem.Result
				err := idem.RunOn(stallGuard(t), s, key, func(ctx context.Context) error {
					clk.Set(t0.Add(idem.DefaultLease + time.Second)) // the process stalls past its lease
					return idem.NothingHappened(idem.CheckLease(ctx))
				}, idem.WithClock(clk), modeOpt, idem.WithBackoff(idem.Constant(time.Minute)), idem.OneAttempt(), idem.ReportTo(&res))
				if !errors.Is(err, idem.ErrBackingOff) || res.Outcome != idem.BackingOff || asked != 0 {
					t.Fatalf("the refusing Run: %v (%s), has asked %d times; want backing off, has not asked", err, res.Outcome, asked)
				}
				if rec := mustLookup(t, s, key); rec.Status != idem.StatusFailed {
					t.Fatalf("record %+v; want failed (retried after the backoff)", rec)
				}
				clk.Advance(2 * time.Minute)
				ran := false
				if err := idem.RunOn(context.Background(), s, key, func(context.Context) error { ran = true; return nil },
					idem.WithClock(clk), modeOpt); err != nil || !ran {
					t.Fatalf("the retry: %v, ran %v", err, ran)
				}
			})
		}
	}
}

// TestFinishAnswerLostMakesRerunRevision: a re-run request comes while the
// attempt runs (RerunAfterRun), and the done mark's answer is lost after
// the store applied it. The done mark made the re-run's revision (the
// record is failed, revision 1, still attempt 1); the engine's re-read
// finds that its done mark landed and reports Ran, not a lease lost to a
// newer attempt.
func TestFinishAnswerLostMakesRerunRevision(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	s := &flakyFinish{Store: store(t, l), err: errors.New("injected: connection reset by peer"), fail: 1, answerLost: true}
	var res idem.Result
	err := idem.RunOn(context.Background(), s, key, func(ctx context.Context) error {
		out, err := idem.Rerun(ctx, l, idem.RerunRequest{Keys: []idem.Key{key}, RequestID: "fix-1", Reason: "repaired"})
		if err != nil || len(out) != 1 || out[0].State != idem.RerunAfterRun {
			return idem.Permanent(fmt.Errorf("Rerun while running: %v, %v", out, err))
		}
		return nil
	}, idem.AtLeastOnce(), idem.WithClock(idemtest.NewAutoClock(t0)), idem.ReportTo(&res))
	if err != nil || res.Outcome != idem.Ran {
		t.Fatalf("Run: %v (%s); want ran", err, res.Outcome)
	}
	if rec := mustLookup(t, l, key); rec.Status != idem.StatusFailed || rec.Revision != 1 || rec.Attempt != 1 {
		t.Fatalf("record %+v; want failed, revision 1 (the re-run's), attempt 1", rec)
	}
}
