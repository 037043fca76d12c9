package idemtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/testwait"
)

// Harness describes a store to the conformance suite [TestStore].
type Harness struct {
	// Open returns a new, empty store whose Runs use clk. Every call must
	// return an independent store. The suite tests the store behind it
	// ([idemstore.Of]): a store of your own implements idemstore.Store.
	Open func(t *testing.T, clk idem.Clock) idem.Store

	// Watermark is set for stores that keep one watermark per job (the
	// state file): the suite then uses one key per job and runs a job's
	// periods in order.
	Watermark bool

	// LeaseExpiry is set for stores whose leases expire by the clock passed
	// to Run, so that a stalled holder can be taken over. It is not set for
	// the state file, whose lock lives as long as its holder.
	LeaseExpiry bool

	// Shift makes d pass for a store that keeps time on its own clock (a
	// database's now()), e.g. by moving every time it stored back by d. The
	// suite calls it whenever it advances the fake clock given to Open;
	// leave it nil for stores that use the clock passed to Run.
	Shift func(t *testing.T, s idem.Store, d time.Duration)

	// Items is set for stores that implement idemstore.ItemStore: the suite then
	// also runs idem.Each over them (every item once in every mode, the item
	// set generated again, a crash at each point of the item protocol, a
	// poison item parked). Shift must then move the stores' item leases and
	// backoff deadlines too.
	Items bool

	// Tx is set for stores whose records share a database with business
	// data: TestModel then also runs a job with idem.RunTx and checks
	// that its business write commits exactly once. See SQLTx.
	Tx *TxHarness

	// Faults, if set, breaks the store's own connection to its server for
	// TestModel's store faults (ModelOptions.Faults): a connection killed
	// by the server, a reply lost after the server applied a write. Without
	// it TestModel fails the store's calls itself, in Go, and gives RunTx
	// jobs no faults.
	Faults *FaultHarness
}

// FaultHarness breaks a store's connection to its server for [TestModel]
// (see ModelOptions.Faults).
type FaultHarness struct {
	// Arm makes the next write of s fail as f says, once, and returns a
	// function that disarms it and reports whether it struck. A write is a
	// statement inside a transaction, a statement outside one that
	// changes data, or a commit: reads outside a transaction are left
	// alone. Arm is called on the goroutine about to write (inside RunTx's
	// transaction, right after fn, for its commit).
	Arm func(t *testing.T, s idem.Store, f Fault) (disarm func() (struck bool))
}

// Fault is a way a [FaultHarness] breaks a write.
type Fault int

const (
	// FaultKill: the server kills the connection before the write runs
	// (MySQL's KILL CONNECTION, say), so its
	// transaction rolls back and nothing of it is applied. A store may get
	// a new connection and do the write after all (database/sql retries a
	// connection found dead before anything was sent): the fault then did
	// not strike.
	FaultKill Fault = iota + 1
	// FaultLoseReply: the server applies the write (the commit, or the
	// statement outside a transaction) and its reply is lost: the client
	// sees its connection break.
	FaultLoseReply
)

// Modes are the Run modes the suite exercises, by name.
var modes = []struct {
	name string
	opt  func(has idem.DownstreamHas) idem.Option
}{
	{"at-least-once", func(idem.DownstreamHas) idem.Option { return idem.AtLeastOnce() }},
	{"at-most-once", func(idem.DownstreamHas) idem.Option { return idem.AtMostOnce() }},
	{"two-phase", func(h idem.DownstreamHas) idem.Option { return idem.TwoPhase(h) }},
}

// downstream is the suite's fake downstream: it records each effect by key.
type downstream struct {
	mu   sync.Mutex
	seen map[idem.Key]int
}

func newDownstream() *downstream { return &downstream{seen: map[idem.Key]int{}} }

func (d *downstream) apply(ctx context.Context) error {
	info, ok := idem.InfoFrom(ctx)
	if !ok {
		return errors.New("idemtest: fn's context carries no idem.Info")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[info.Key]++
	return nil
}

func (d *downstream) count(k idem.Key) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[k]
}

func (d *downstream) has(_ context.Context, k idem.Key) (bool, error) { return d.count(k) > 0, nil }

// TestStore runs the conformance suite against the store h opens: the
// promises every idem store keeps, whatever it is built on (and, for an
// idemstore.CatchUpStore, those of catch-up). Call it from a test of your own
// store:
//
//	func TestMyStore(t *testing.T) {
//		idemtest.TestStore(t, idemtest.Harness{Open: ..., LeaseExpiry: true})
//	}
func TestStore(t *testing.T, h Harness) {
	t.Run("DuplicateTrigger", func(t *testing.T) { testDuplicate(t, h) })
	t.Run("ConcurrentTrigger", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("CrashPoints", func(t *testing.T) { testCrashPoints(t, h) })
	t.Run("TwoPhase", func(t *testing.T) { testTwoPhase(t, h) })
	t.Run("BackoffPersists", func(t *testing.T) { testBackoff(t, h) })
	t.Run("ParkAndReset", func(t *testing.T) { testPark(t, h) })
	t.Run("UnknownAndResolve", func(t *testing.T) { testResolve(t, h) })
	if h.LeaseExpiry {
		t.Run("LeaseExpiryFencing", func(t *testing.T) { testLease(t, h) })
	}
	t.Run("CatchUp", func(t *testing.T) { testCatchUp(t, h) })
	t.Run("Params", func(t *testing.T) { testParams(t, h) })
	t.Run("Values", func(t *testing.T) { testValues(t, h) })
	if h.Items {
		t.Run("Items", func(t *testing.T) { testItems(t, h) })
	}
	t.Run("MarkFresh", func(t *testing.T) { testMarkFresh(t, h) })
	t.Run("Rerun", func(t *testing.T) { testRerun(t, h) })
	t.Run("Wake", func(t *testing.T) { testWake(t, h) })
}

// testMarkFresh: a store that is an idemstore.FreshMarker writes a key
// with no record done, as attempt 1 of the request's owner, with its
// fingerprint; it finds a done key done (unless its fingerprint differs),
// and leaves alone a key that is done, held, or below its job's horizon;
// a stop at AfterClaim or AfterFn writes nothing.
// A store that is not one is skipped.
func testMarkFresh(t *testing.T, h Harness) {
	clk := NewClock(start)
	s := h.open(t, clk)
	m, ok := s.(idemstore.FreshMarker)
	if !ok {
		t.Skipf("%T is not an idemstore.FreshMarker", s)
	}
	ctx := context.Background()
	req := func(period string) idemstore.ClaimRequest {
		return idemstore.ClaimRequest{Key: idem.Key{Job: "mark", Period: period}, Owner: "marker", Now: clk.Now(),
			Lease: time.Minute, Fingerprint: "fp-1"}
	}
	record := func(period string) (idemstore.Record, bool) {
		t.Helper()
		rec, ok, err := s.Lookup(ctx, req(period).Key)
		if err != nil {
			t.Fatal(err)
		}
		return rec, ok
	}
	mark := func(ctx context.Context, period string) bool {
		t.Helper()
		done, err := m.MarkFresh(ctx, req(period))
		if err != nil {
			t.Fatalf("MarkFresh %s: %v", period, err)
		}
		return done
	}
	if !mark(ctx, "2026-10-10") {
		t.Fatal("MarkFresh of a key with no record: false, want true")
	}
	if rec, _ := record("2026-10-10"); rec.Status != idemstore.StatusDone || rec.Attempt != 1 || rec.Owner != "marker" || rec.Fingerprint != "fp-1" || rec.Value != nil {
		t.Fatalf("the marked key's record %+v; want done, attempt 1, owner marker, fingerprint fp-1, no value", rec)
	}
	// A key done already (by another holder's mark, say): true, and the
	// record is left as it was; with another fingerprint, false.
	if !mark(ctx, "2026-10-10") {
		t.Fatal("MarkFresh of a done key: false, want true")
	}
	other := req("2026-10-10")
	other.Owner, other.Fingerprint = "another", "fp-2"
	if done, err := m.MarkFresh(ctx, other); done || err != nil {
		t.Fatalf("MarkFresh of a done key with another fingerprint: %v, %v; want false", done, err)
	}
	if rec, _ := record("2026-10-10"); rec.Attempt != 1 || rec.Owner != "marker" || rec.Fingerprint != "fp-1" {
		t.Fatalf("a done key's record after MarkFresh: %+v; want it unchanged", rec)
	}
	if c, err := s.Claim(ctx, req("2026-10-11")); err != nil || c.State != idemstore.ClaimAcquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if mark(ctx, "2026-10-11") {
		t.Fatal("MarkFresh of a held key: true, want false")
	}
	if rec, _ := record("2026-10-11"); rec.Status != idemstore.StatusRunning || rec.Attempt != 1 {
		t.Fatalf("a held key's record after MarkFresh: %+v; want running, attempt 1", rec)
	}
	for _, at := range []idemstore.Point{idemstore.AfterClaim, idemstore.AfterFn} {
		stop := CrashWhen(ctx, func(p Point, _ idem.Key) bool { return p == at })
		if done, err := m.MarkFresh(stop, req("2026-10-12")); done || !errors.Is(err, ErrCrashed) {
			t.Fatalf("MarkFresh stopped at %s: %v, %v; want false and the stop", at, done, err)
		}
		if rec, ok := record("2026-10-12"); ok {
			t.Fatalf("a stop at %s left a record: %+v", at, rec)
		}
	}
	if cs, ok := s.(idemstore.CatchUpStore); ok {
		if _, err := cs.Prune(ctx, "mark", "2026-10-05"); err != nil {
			t.Fatal(err)
		}
		if mark(ctx, "2026-10-01") {
			t.Fatal("MarkFresh of a key below the job's horizon: true, want false")
		}
	}
}

var start = time.Date(2026, 10, 28, 2, 0, 0, 0, time.UTC)

// open opens a store on clk; when the store keeps its own clock, every move
// of clk (by the test or, for an auto clock, by the engine's sleeps) is
// passed on to Shift.
func (h Harness) open(t *testing.T, clk *Clock) idemstore.Store {
	s, err := idemstore.Of(h.Open(t, clk))
	if err != nil {
		t.Fatalf("idemtest: Harness.Open: %v", err)
	}
	if h.Shift != nil {
		clk.mu.Lock()
		clk.onMove = func(d time.Duration) { h.Shift(t, s, d) }
		clk.mu.Unlock()
	}
	return s
}

// advance makes d pass on the fake clock and on the store's own clock.
func (h Harness) advance(t *testing.T, s idemstore.Store, clk *Clock, d time.Duration) {
	clk.Advance(d)
}

// expire makes every lease taken so far expire.
func (h Harness) expire(t *testing.T, s idemstore.Store, clk *Clock) {
	h.advance(t, s, clk, idem.DefaultLease+time.Second)
}

func testDuplicate(t *testing.T, h Harness) {
	clk := NewClock(start)
	s := h.open(t, clk)
	d := newDownstream()
	k := idem.Key{Job: "dup", Period: "2026-10-27"}
	for i := range 20 {
		var res idem.Result
		if err := idem.RunOn(context.Background(), s, k, d.apply, idem.WithClock(clk), idem.ReportTo(&res)); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if want := map[bool]idem.Outcome{true: idem.Ran, false: idem.AlreadyDone}[i == 0]; res.Outcome != want {
			t.Fatalf("run %d: outcome %v, want %v", i, res.Outcome, want)
		}
	}
	if got := d.count(k); got != 1 {
		t.Fatalf("fn ran %d times, want 1", got)
	}
	// With a watermark, an earlier period is done too.
	if h.Watermark {
		early := idem.Key{Job: "dup", Period: "2026-10-26"}
		var res idem.Result
		if err := idem.RunOn(context.Background(), s, early, d.apply, idem.WithClock(clk), idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
			t.Fatalf("period below the watermark: %v, %v", err, res.Outcome)
		}
	}
}

func testConcurrent(t *testing.T, h Harness) {
	clk := NewClock(start)
	s := h.open(t, clk)
	d := newDownstream()
	k := idem.Key{Job: "concurrent", Period: "2026-10-27"}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := idem.RunOn(context.Background(), s, k, d.apply, idem.WithClock(clk))
			if err != nil && !errors.Is(err, idem.ErrInProgress) {
				errs <- err
			}
		}()
	}
	testwait.Group(t, &wg, "16 concurrent Runs of %s", k)
	close(errs)
	for err := range errs {
		t.Errorf("Run: %v (only nil or ErrInProgress may reach a caller)", err)
	}
	// Whoever got ErrInProgress, the key is done and ran once.
	if err := idem.RunOn(context.Background(), s, k, d.apply, idem.WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	if got := d.count(k); got != 1 {
		t.Fatalf("fn ran %d times, want 1", got)
	}
}

// testCrashPoints stops a Run at every crash point, in every mode, the way
// a SIGKILL would, then recovers with a second Run on the same store.
func testCrashPoints(t *testing.T, h Harness) {
	for _, m := range modes {
		for _, p := range idemstore.Points() {
			t.Run(m.name+"/"+string(p), func(t *testing.T) {
				clk := NewClock(start)
				s := h.open(t, clk)
				d := newDownstream()
				k := idem.Key{Job: "crash", Period: "2026-10-27"}
				opts := []idem.Option{idem.WithClock(clk), m.opt(d.has)}
				err := idem.RunOn(CrashAt(context.Background(), p), s, k, d.apply, opts...)
				crashed := errors.Is(err, ErrCrashed)
				if err != nil && !crashed {
					t.Fatalf("crashing run: %v", err)
				}
				if !crashed {
					t.Skipf("the store has no crash point %s", p)
				}
				h.expire(t, s, clk)
				var res idem.Result
				err = idem.RunOn(context.Background(), s, k, d.apply, append(opts, idem.ReportTo(&res))...)
				n := d.count(k)
				rec, ok, lerr := s.Lookup(context.Background(), k)
				if lerr != nil || !ok {
					t.Fatalf("Lookup: %v, found %v", lerr, ok)
				}
				switch m.name {
				case "at-least-once":
					if err != nil || rec.Status != idem.StatusDone || n < 1 {
						t.Fatalf("recovery: %v, status %s, effects %d; want done, at least 1", err, rec.Status, n)
					}
				case "at-most-once":
					if n > 1 {
						t.Fatalf("fn ran %d times", n)
					}
					switch rec.Status {
					case idem.StatusDone:
						if err != nil || n != 1 {
							t.Fatalf("done with effects %d, err %v", n, err)
						}
					case idem.StatusUnknown:
						if !errors.Is(err, idem.ErrUnknownOutcome) {
							t.Fatalf("unknown key: Run returned %v", err)
						}
					default:
						t.Fatalf("status %s after recovery (%v)", rec.Status, err)
					}
				case "two-phase":
					if err != nil || rec.Status != idem.StatusDone || n != 1 {
						t.Fatalf("recovery: %v, status %s, effects %d; want done, exactly 1", err, rec.Status, n)
					}
				}
				// One more trigger changes nothing.
				before := d.count(k)
				err = idem.RunOn(context.Background(), s, k, d.apply, opts...)
				if d.count(k) != before || (err != nil && !errors.Is(err, idem.ErrUnknownOutcome)) {
					t.Fatalf("trigger after recovery: %v, effects %d → %d", err, before, d.count(k))
				}
			})
		}
	}
}

func testTwoPhase(t *testing.T, h Harness) {
	ctx := context.Background()
	t.Run("fn failed but the downstream has it", func(t *testing.T) {
		clk := NewAutoClock(start)
		s := h.open(t, clk)
		d := newDownstream()
		k := idem.Key{Job: "tp-timeout", Period: "2026-10-27"}
		var res idem.Result
		err := idem.RunOn(ctx, s, k, func(ctx context.Context) error {
			_ = d.apply(ctx)
			return errors.New("gateway timeout after sending")
		}, idem.WithClock(clk), idem.TwoPhase(d.has), idem.ReportTo(&res))
		if err != nil || res.Outcome != idem.Recovered || d.count(k) != 1 {
			t.Fatalf("%v, outcome %v, effects %d; want Recovered, 1", err, res.Outcome, d.count(k))
		}
	})
	t.Run("fn failed and the downstream lacks it", func(t *testing.T) {
		clk := NewAutoClock(start)
		s := h.open(t, clk)
		d := newDownstream()
		k := idem.Key{Job: "tp-retry", Period: "2026-10-27"}
		calls := 0
		err := idem.RunOn(ctx, s, k, func(ctx context.Context) error {
			if calls++; calls == 1 {
				return errors.New("connection refused")
			}
			return d.apply(ctx)
			// The auto clock also moves while fn runs (the heartbeat waits on
			// it, as often as the store renews): WaitForTurn lets the retry
			// happen in this call whatever it reads.
		}, idem.WithClock(clk), idem.TwoPhase(d.has), idem.WaitForTurn())
		if err != nil || calls != 2 || d.count(k) != 1 {
			t.Fatalf("%v, calls %d, effects %d", err, calls, d.count(k))
		}
	})
	t.Run("the check fails", func(t *testing.T) {
		clk := NewClock(start)
		s := h.open(t, clk)
		d := newDownstream()
		k := idem.Key{Job: "tp-checkfail", Period: "2026-10-27"}
		down := errors.New("gateway unreachable")
		broken := func(context.Context, idem.Key) (bool, error) { return false, down }
		if err := idem.RunOn(CrashAt(ctx, idemstore.AfterFn), s, k, d.apply, idem.WithClock(clk), idem.TwoPhase(broken)); !errors.Is(err, ErrCrashed) {
			t.Fatalf("crash: %v", err)
		}
		h.expire(t, s, clk)
		err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.TwoPhase(broken))
		if !errors.Is(err, down) || !errors.Is(err, idem.ErrUnknownOutcome) || d.count(k) != 1 {
			t.Fatalf("%v, effects %d; want the check's error, unknown, 1 effect", err, d.count(k))
		}
		// The key stays pending; once the check works, it settles without a second effect.
		var res idem.Result
		if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.TwoPhase(d.has), idem.ReportTo(&res)); err != nil || res.Outcome != idem.Recovered {
			t.Fatalf("%v, outcome %v; want Recovered", err, res.Outcome)
		}
		if d.count(k) != 1 {
			t.Fatalf("effects %d, want 1", d.count(k))
		}
	})
}

// testBackoff: the failure count and the next allowed time live in the
// store, so a separate Run (a new process, the next cron tick) honours them.
func testBackoff(t *testing.T, h Harness) {
	clk := NewClock(start)
	s := h.open(t, clk)
	k := idem.Key{Job: "backoff", Period: "2026-10-27"}
	b := idem.MaxAttempts(3, idem.Exponential(time.Hour))
	calls := 0
	fail := func(context.Context) error { calls++; return errors.New("downstream down") }
	run := func() error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := clk.Waiters() + 1
		go func() { // stop the in-process retry at its sleep (a run that does not sleep ends ctx itself)
			if clk.BlockUntilContext(ctx, n) == nil {
				cancel()
			}
		}()
		return idem.RunOn(ctx, s, k, fail, idem.WithClock(clk), idem.WithBackoff(b))
	}
	if err := run(); !errors.Is(err, idem.ErrBackingOff) || calls != 1 {
		t.Fatalf("first run: %v, calls %d", err, calls)
	}
	h.advance(t, s, clk, 30*time.Minute)
	var ierr *idem.Error
	if err := run(); !errors.Is(err, idem.ErrBackingOff) || !errors.As(err, &ierr) || ierr.NotBefore.IsZero() || calls != 1 {
		t.Fatalf("within the backoff: %v, calls %d", err, calls)
	}
	h.advance(t, s, clk, 31*time.Minute)
	if err := run(); !errors.Is(err, idem.ErrBackingOff) || calls != 2 {
		t.Fatalf("second attempt: %v, calls %d", err, calls)
	}
	rec, _, _ := s.Lookup(context.Background(), k)
	if rec.Failures != 2 || rec.Status != idem.StatusFailed {
		t.Fatalf("record after 2 failures: %+v", rec)
	}
	h.advance(t, s, clk, 2*time.Hour)
	if err := run(); !errors.Is(err, idem.ErrParked) || calls != 3 {
		t.Fatalf("third attempt: %v, calls %d", err, calls)
	}
}

func testPark(t *testing.T, h Harness) {
	clk := NewAutoClock(start)
	s := h.open(t, clk)
	k := idem.Key{Job: "park", Period: "2026-10-27"}
	bad := errors.New("account closed")
	if err := idem.RunOn(context.Background(), s, k, func(context.Context) error { return idem.Permanent(bad) }, idem.WithClock(clk)); !errors.Is(err, idem.ErrParked) || !errors.Is(err, bad) {
		t.Fatalf("permanent error: %v", err)
	}
	ran := false
	if err := idem.RunOn(context.Background(), s, k, func(context.Context) error { ran = true; return nil }, idem.WithClock(clk)); !errors.Is(err, idem.ErrParked) || ran {
		t.Fatalf("parked key: %v, ran %v", err, ran)
	}
	if err := s.Resolve(context.Background(), k, idem.ResolveRetry); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if err := idem.RunOn(context.Background(), s, k, func(context.Context) error { ran = true; return nil }, idem.WithClock(clk)); err != nil || !ran {
		t.Fatalf("after Reset: %v, ran %v", err, ran)
	}
}

func testResolve(t *testing.T, h Harness) {
	clk := NewClock(start)
	s := h.open(t, clk)
	ctx := context.Background()
	for _, to := range []idem.Resolution{idem.ResolveDone, idem.ResolveRetry} {
		k := idem.Key{Job: fmt.Sprintf("resolve-%d", to), Period: "2026-10-27"}
		d := newDownstream()
		if err := idem.RunOn(CrashAt(ctx, idemstore.AfterFn), s, k, d.apply, idem.WithClock(clk), idem.AtMostOnce()); !errors.Is(err, ErrCrashed) {
			t.Fatalf("crash: %v", err)
		}
		h.expire(t, s, clk)
		if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.AtMostOnce()); !errors.Is(err, idem.ErrUnknownOutcome) {
			t.Fatalf("after the crash: %v, want ErrUnknownOutcome", err)
		}
		if err := s.Resolve(ctx, k, to); err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		var res idem.Result
		if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.AtMostOnce(), idem.ReportTo(&res)); err != nil {
			t.Fatalf("after Resolve: %v", err)
		}
		want, effects := idem.AlreadyDone, 1
		if to == idem.ResolveRetry {
			want, effects = idem.Ran, 2
		}
		if res.Outcome != want || d.count(k) != effects {
			t.Fatalf("resolution %d: outcome %v, effects %d; want %v, %d", to, res.Outcome, d.count(k), want, effects)
		}
		if err := s.Resolve(ctx, k, idem.ResolveRetry); !errors.Is(err, idem.ErrNotResolvable) {
			t.Fatalf("Resolve of a done key: %v, want ErrNotResolvable", err)
		}
	}
}

func testLease(t *testing.T, h Harness) {
	clk := NewClock(start)
	s := h.open(t, clk)
	k := idem.Key{Job: "lease", Period: "2026-10-27"}
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		// A runs on a clock of its own that never moves: its heartbeat
		// never renews, as if it had stalled.
		frozen := NewClock(start)
		aErr <- idem.RunOn(ctx, s, k, func(context.Context) error {
			close(started)
			<-release
			return nil
		}, idem.WithClock(frozen))
	}()
	testwait.Recv(t, started, "A's fn to start")
	h.expire(t, s, clk)
	var info idem.Info
	if err := idem.RunOn(ctx, s, k, func(ctx context.Context) error { info, _ = idem.InfoFrom(ctx); return nil }, idem.WithClock(clk)); err != nil {
		t.Fatalf("B after A's lease expired: %v", err)
	}
	if info.Attempt != 2 {
		t.Fatalf("B attempt %d, want 2", info.Attempt)
	}
	close(release)
	if err := testwait.Recv(t, aErr, "A's Run to return after B took over"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("A's done: %v, want ErrLeaseLost", err)
	}
}

// testCatchUp checks the promises of an idemstore.CatchUpStore; a store that is
// not one skips it.
func testCatchUp(t *testing.T, h Harness) {
	t.Run("FirstPeriodFailsIsNotSkipped", func(t *testing.T) {
		for _, parked := range []bool{false, true} {
			t.Run(map[bool]string{false: "backing-off", true: "parked-then-reset"}[parked], func(t *testing.T) {
				testFirstPeriodFails(t, h, parked)
			})
		}
	})
	t.Run("StartIsIdempotent", func(t *testing.T) { testStart(t, h) })
}

func (h Harness) openCatchUp(t *testing.T, clk *Clock) idemstore.CatchUpStore {
	s, ok := h.open(t, clk).(idemstore.CatchUpStore)
	if !ok {
		t.Skip("the store is not an idemstore.CatchUpStore")
	}
	return s
}

// testFirstPeriodFails: a job whose very first period fails keeps it. 48
// hours later, with a later clock, catch-up starts at that period, not at
// its own latest due period, and runs it and the two after it in order.
func testFirstPeriodFails(t *testing.T, h Harness, parked bool) {
	ctx := context.Background()
	shanghai := time.FixedZone("CST", 8*3600) // Asia/Shanghai: no daylight saving time
	sched := idem.Daily(shanghai)
	clk := NewClock(time.Date(2026, 11, 30, 18, 5, 0, 0, time.UTC)) // 02:05 on 1 December in Shanghai
	s := h.openCatchUp(t, clk)
	first := idem.Key{Job: "first-fails", Period: "2026-11-30"}
	boom := errors.New("downstream refused")
	if parked {
		boom = idem.Permanent(boom)
	}
	res, err := idem.CatchUp(ctx, s, first.Job, sched, func(context.Context, idem.Period) error { return boom },
		idem.WithClock(clk), idem.OneAttempt())
	if !errors.Is(err, boom) || len(res.Periods) != 1 || res.Periods[0].Period.Name != first.Period {
		t.Fatalf("first call: %v, periods %+v; want %s failed", err, res.Periods, first.Period)
	}
	rec, ok, err := s.Lookup(ctx, first)
	if err != nil || !ok || (rec.Status != idem.StatusFailed && rec.Status != idem.StatusParked) {
		t.Fatalf("%s after its failure: %+v, found %v, %v", first, rec, ok, err)
	}

	h.advance(t, s, clk, 48*time.Hour)
	var ran []string
	ok2 := func(_ context.Context, p idem.Period) error { ran = append(ran, p.Name); return nil }
	res, err = idem.CatchUp(ctx, s, first.Job, sched, ok2, idem.WithClock(clk), idem.OneAttempt())
	if parked {
		// The parked period stops the catch-up; the two after it wait.
		if !errors.Is(err, idem.ErrParked) || len(ran) != 0 || res.Deferred != 2 {
			t.Fatalf("with %s parked: %v, ran %v, deferred %d; want ErrParked, nothing run, 2 deferred", first, err, ran, res.Deferred)
		}
		if err := s.Resolve(ctx, first, idem.ResolveRetry); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		res, err = idem.CatchUp(ctx, s, first.Job, sched, ok2, idem.WithClock(clk), idem.OneAttempt())
	}
	want := []string{"2026-11-30", "2026-12-01", "2026-12-02"}
	if err != nil || !slices.Equal(ran, want) || res.Cursor != "2026-12-02" {
		t.Fatalf("48 hours later: %v, ran %v, cursor %q; want ran %v, cursor 2026-12-02", err, ran, res.Cursor, want)
	}
	if js, err := s.Job(ctx, first.Job); err != nil || js.Cursor != "2026-12-02" {
		t.Fatalf("stored cursor %q (%v), want 2026-12-02", js.Cursor, err)
	}
	for _, p := range want {
		if rec, ok, err := s.Lookup(ctx, idem.Key{Job: first.Job, Period: p}); err != nil || !ok || rec.Status != idem.StatusDone {
			t.Fatalf("%s: %+v, found %v, %v; want done", p, rec, ok, err)
		}
	}
}

// testStart: the first Start of a job sets its cursor; later ones, with
// any period, earlier or later, leave it, also when they race.
func testStart(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.openCatchUp(t, clk)
	js, err := s.Start(ctx, "start", "2026-10-26")
	if err != nil || js.Cursor != "2026-10-26" {
		t.Fatalf("first Start: %+v, %v; want cursor 2026-10-26", js, err)
	}
	for _, before := range []string{"2026-10-26", "2026-10-27", "2026-10-20"} {
		if js, err := s.Start(ctx, "start", before); err != nil || js.Cursor != "2026-10-26" {
			t.Fatalf("Start(%s) of a started job: %+v, %v; want cursor 2026-10-26 kept", before, js, err)
		}
	}
	if js, err := s.Job(ctx, "start"); err != nil || js.Cursor != "2026-10-26" {
		t.Fatalf("Job after the Starts: %+v, %v", js, err)
	}
	// Once catch-up has moved the cursor, Start leaves it there too.
	var ran []string
	res, err := idem.CatchUp(ctx, s, "start", idem.Daily(time.UTC), func(_ context.Context, p idem.Period) error {
		ran = append(ran, p.Name)
		return nil
	}, idem.WithClock(clk))
	if err != nil || !slices.Equal(ran, []string{"2026-10-27"}) || res.Cursor != "2026-10-27" {
		t.Fatalf("catch-up after Start: %v, ran %v, cursor %q; want 2026-10-27", err, ran, res.Cursor)
	}
	if js, err := s.Start(ctx, "start", "2026-10-01"); err != nil || js.Cursor != "2026-10-27" {
		t.Fatalf("Start after catch-up: %+v, %v; want cursor 2026-10-27 kept", js, err)
	}

	// Racing first Starts with different periods: all that succeed agree
	// on one of them. (A store may refuse a Start while another holds the
	// job, with ErrInProgress.)
	befores := []string{"2026-10-20", "2026-10-21", "2026-10-22", "2026-10-23", "2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"}
	got := make([]idemstore.JobState, len(befores))
	errs := make([]error, len(befores))
	var wg sync.WaitGroup
	for i, b := range befores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.Start(ctx, "race", b)
		}()
	}
	testwait.Group(t, &wg, "%d racing Starts of job race", len(befores))
	cursor := ""
	for i := range befores {
		switch {
		case errors.Is(errs[i], idem.ErrInProgress):
		case errs[i] != nil:
			t.Fatalf("Start(%s): %v", befores[i], errs[i])
		case cursor == "":
			cursor = got[i].Cursor
		case got[i].Cursor != cursor:
			t.Fatalf("racing Starts disagree: %q and %q", cursor, got[i].Cursor)
		}
	}
	if !slices.Contains(befores, cursor) {
		t.Fatalf("racing Starts: cursor %q, want one of %v (none succeeded?)", cursor, befores)
	}
	if js, err := s.Job(ctx, "race"); err != nil || js.Cursor != cursor {
		t.Fatalf("Job after racing Starts: %+v, %v; want cursor %q", js, err, cursor)
	}
}
