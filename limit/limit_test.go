package limit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/limit"
)

func TestLimitsSQLite(t *testing.T) {
	idemtest.TestLimits(t, func(t *testing.T) idem.Store { return testledger.Open(t, t.TempDir()) })
}

// sqliteHarness opens one ledger file from several processes.
var sqliteHarness = idemtest.LimitHarness{
	New: func(t *testing.T) string {
		dir := t.TempDir()
		testledger.Open(t, dir) // the file, before the processes open it
		return dir
	},
	Open: func(t *testing.T, dir string) idem.Store {
		return testledger.Open(t, dir)
	},
}

func TestSharedLimitsSQLite(t *testing.T) {
	t.Parallel() // its rate is measured on real time: waits, which the others fill
	idemtest.TestSharedLimits(t, sqliteHarness)
}

func TestStateFileKeepsNoLimits(t *testing.T) {
	sf := testledger.OpenState(t, t.TempDir())
	_, err := limit.NewRate(sf, "mail", 10, 1)
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "*idem.StateFile") || !strings.Contains(err.Error(), `"mail"`) {
		t.Fatalf("NewRate on a state file: %v; want ErrInvalidOption naming the store's type and the limit", err)
	}
	if _, err := limit.NewAtOnce(sf, "mail", 1, 0); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("NewAtOnce on a state file: %v", err)
	}
}

func TestBadLimits(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"rate 0", func() error { _, err := limit.NewRate(l, "a", 0, 1); return err }, "rate must be above 0"},
		{"burst 0", func() error { _, err := limit.NewRate(l, "a", 1, 0); return err }, "burst at least 1"},
		{"empty name", func() error { _, err := limit.NewRate(l, "", 1, 1); return err }, "limit name is empty"},
		{"control", func() error { _, err := limit.NewAtOnce(l, "a\nb", 1, 0); return err }, "control character"},
		{"max 0", func() error { _, err := limit.NewAtOnce(l, "a", 0, 0); return err }, "at least one holder"},
		{"lease", func() error { _, err := limit.NewAtOnce(l, "a", 1, time.Millisecond); return err }, "lease of at least a second"},
		{"nil store", func() error { _, err := limit.NewRate(nil, "a", 1, 1); return err }, "no store"},
		{"nil limit", func() error {
			return idem.RunOn(context.Background(), l, idem.Key{Job: "j", Period: "p"},
				func(context.Context) error { return nil }, idem.WithLimits(nil))
		}, "not a limit"},
	} {
		if err := c.err(); !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrInvalidOption saying %q", c.name, err, c.want)
		}
	}
}

// TestLongLimitNameCut: a 10 KB limit name is quoted in its error cut
// short, with its length (idemstore.QuotePart, as a key's parts are), not
// whole.
func TestLongLimitNameCut(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	long := strings.Repeat("x", 10240)
	for name, f := range map[string]func() error{
		"NewRate":   func() error { _, err := limit.NewRate(l, long, 1, 1); return err },
		"NewAtOnce": func() error { _, err := limit.NewAtOnce(l, long, 1, 0); return err },
		"nil store": func() error { _, err := limit.NewRate(nil, long, 1, 1); return err },
		"state file": func() error {
			_, err := limit.NewRate(testledger.OpenState(t, t.TempDir()), long, 1, 1)
			return err
		},
	} {
		err := f()
		if !errors.Is(err, idem.ErrInvalidOption) || len(err.Error()) > 400 || !strings.Contains(err.Error(), "… (10240 bytes)") {
			t.Errorf("%s: an error of %d bytes (%.300v); want ErrInvalidOption quoting the name cut short, with its length", name, len(fmt.Sprint(err)), err)
		}
	}
}

// A run that cannot get a place is deferred when its context ends:
// nothing claimed, nothing written, and the Deferral names the limit.
func TestWaitingForALimitDefers(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	a, err := limit.NewAtOnce(l, "settle", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	slot, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release()
	key := idem.Key{Job: "settle", Period: "2026-12-01"}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var res idem.Result
	err = idem.RunOn(wctx, l, key, func(context.Context) error {
		t.Error("fn ran without a place")
		return nil
	}, idem.WithLimits(a), idem.ReportTo(&res))
	var d *idem.Deferral
	if !errors.Is(err, idem.ErrDeferred) || !errors.As(err, &d) || d.Reason != "limit settle" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run while the only place is held: %v; want ErrDeferred, reason \"limit settle\", the context's error", err)
	}
	if res.Outcome != idem.Deferred {
		t.Fatalf("outcome %v, want Deferred", res.Outcome)
	}
	if rec, ok, err := l.Lookup(ctx, key); err != nil || ok {
		t.Fatalf("the key after a deferred run: %+v, found %v, %v; want nothing written", rec, ok, err)
	}
	// Given the place back, the next trigger runs it.
	if err := slot.Release(); err != nil {
		t.Fatal(err)
	}
	if err := idem.RunOn(ctx, l, key, func(context.Context) error { return nil }, idem.WithLimits(a)); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := l.Lookup(ctx, key); rec.Status != idem.StatusDone || rec.Attempt != 1 {
		t.Fatalf("record %+v; want done at attempt 1 (waiting counted no attempt)", rec)
	}
}

// A done key takes nothing of its limits: a rate of one start an hour,
// spent, does not hold a duplicate back.
func TestDoneKeyTakesNothing(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	r, err := limit.NewRate(l, "mail", 1.0/3600, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := idem.Key{Job: "mail", Period: "2026-12-01"}
	if err := idem.RunOn(ctx, l, key, func(context.Context) error { return nil }, idem.WithLimits(r)); err != nil {
		t.Fatal(err)
	}
	var res idem.Result
	if err := idem.RunOn(ctx, l, key, func(context.Context) error { return nil }, idem.WithLimits(r), idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("the duplicate: %v, outcome %v; want AlreadyDone at once", err, res.Outcome)
	}
	// A new key waits an hour: deferred by the deadline.
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	if err := idem.RunOn(sctx, l, idem.Key{Job: "mail", Period: "2026-12-02"}, func(context.Context) error { return nil }, idem.WithLimits(r)); !errors.Is(err, idem.ErrDeferred) {
		t.Fatalf("a second start within the hour: %v; want deferred", err)
	}
}

// A catch-up takes a start of the rate per period: with two starts, two
// periods are done and the third is deferred, not failed.
func TestCatchUpTakesAStartPerPeriod(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	r, err := limit.NewRate(l, "report", 1.0/3600, 2)
	if err != nil {
		t.Fatal(err)
	}
	cal := idem.Daily(time.UTC)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var ran []string
	_, err = idem.CatchUp(ctx, l, "report", cal, func(ctx context.Context, p idem.Period) error {
		ran = append(ran, p.Name)
		return nil
	}, idem.Since(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), idem.WithClock(idemtest.NewClock(now)), idem.WithLimits(r))
	if !errors.Is(err, idem.ErrDeferred) {
		t.Fatalf("catch-up of 4 periods with 2 starts: %v; want deferred", err)
	}
	if !slices.Equal(ran, []string{"2026-12-01", "2026-12-02"}) {
		t.Fatalf("ran %v; want the first two periods", ran)
	}
	if rec, ok, _ := l.Lookup(context.Background(), idem.Key{Job: "report", Period: "2026-12-03"}); ok {
		t.Fatalf("the third period: %+v; want nothing written", rec)
	}
}

// Each holds a place of an AtOnce limit for the whole call, and takes a
// start of a rate per item.
func TestEachHoldsAPlace(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	a, err := limit.NewAtOnce(l, "batch", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := limit.NewRate(l, "items", 1.0/3600, 5)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var inside atomic.Bool
	items := idem.Items(slices.Values([]string{"a", "b", "c", "d", "e", "f", "g"}))
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var n atomic.Int32
	_, err = idem.Each(sctx, l, idem.Key{Job: "batch", Period: "2026-12-01"}, items, func(ctx context.Context, item string) error {
		if !inside.Load() {
			inside.Store(true)
			// While Each holds the only place, no other holder gets it.
			if _, ok, err := a.TryAcquire(ctx); err != nil || ok {
				t.Errorf("a place while Each holds the only one: ok %v, %v", ok, err)
			}
		}
		n.Add(1)
		return nil
	}, idem.WithLimits(a, r), idem.WithWorkers(1))
	if err == nil || n.Load() != 5 {
		t.Fatalf("Each of 7 items with 5 starts: %v, %d items ran; want 5 and an error", err, n.Load())
	}
	// The call ended: its place is back.
	s, ok, err := a.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("the place after Each: ok %v, %v", ok, err)
	}
	s.Release()
}

// More starts at once than the burst are reserved, however long they must
// wait: WaitN(250) of a rate of 100 a second, burst 2, waits about 2.5 s
// for the starts beyond the burst (more than the 2 s a Rate reserves
// ahead), and comes back.
func TestWaitNBeyondTheBurst(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	r, err := limit.NewRate(l, "bulk", 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.WaitN(ctx, 250); err != nil {
		t.Fatalf("WaitN(250) with burst 2: %v", err)
	}
}

// RunTx takes a start like Run: with one start an hour, the second key's
// RunTx is deferred before its transaction begins, its business write
// never made.
func TestRunTxTakesAStart(t *testing.T) {
	l := testledger.Open(t, t.TempDir())
	if _, err := l.DB().Exec(`CREATE TABLE sent (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	r, err := limit.NewRate(l, "mail", 1.0/3600, 1)
	if err != nil {
		t.Fatal(err)
	}
	send := func(ctx context.Context, tx *sql.Tx) error {
		info, _ := idem.InfoFrom(ctx)
		_, err := tx.ExecContext(ctx, `INSERT INTO sent VALUES (?)`, info.Key.Period)
		return err
	}
	ctx := context.Background()
	if err := idem.RunTx(ctx, l, idem.Key{Job: "mail", Period: "2026-12-01"}, send, idem.WithLimits(r)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := idem.RunTx(wctx, l, idem.Key{Job: "mail", Period: "2026-12-02"}, send, idem.WithLimits(r)); !errors.Is(err, idem.ErrDeferred) {
		t.Fatalf("the second RunTx within the hour: %v; want deferred", err)
	}
	var n int
	if err := l.DB().QueryRow(`SELECT count(*) FROM sent`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("business rows %d, %v; want 1", n, err)
	}
}

// TestRateAcrossStallSQLite: starts reserved before the ledger's claims
// stalled do not go together with the burst that refilled meanwhile.
func TestRateAcrossStallSQLite(t *testing.T) {
	t.Parallel() // 8 s of waiting on real time, as the two below
	idemtest.TestRateAcrossStall(t, testledger.Open(t, t.TempDir()))
}

// TestRateAcrossStallTxSQLite is TestRateAcrossStallSQLite for RunTx: its
// transactions stall before they begin.
func TestRateAcrossStallTxSQLite(t *testing.T) {
	t.Parallel()
	idemtest.TestRateAcrossStallTx[*sql.Tx](t, testledger.Open(t, t.TempDir()))
}

// TestRateAcrossStallEachTxSQLite is TestRateAcrossStallSQLite for the
// items of idem.EachTx: a window's transaction stalls before it begins.
func TestRateAcrossStallEachTxSQLite(t *testing.T) {
	t.Parallel()
	idemtest.TestRateAcrossStallEachTx[*sql.Tx](t, testledger.Open(t, t.TempDir()))
}
