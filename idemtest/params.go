package idemtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// testParams: a key's fingerprint (idem.WithParams) is stored with its
// first claim; a later call with another one gets ErrParamsMismatch and
// changes nothing, whatever the key's status; a call without one is not
// checked; Reset keeps it.
func testParams(t *testing.T, h Harness) {
	ctx := context.Background()
	type rates struct {
		Table   string   `json:"table"`
		Version int      `json:"version"`
		Account []string `json:"accounts"`
	}
	a := rates{Table: "eur", Version: 3, Account: []string{"acme", "globex"}}
	b := rates{Table: "eur", Version: 4, Account: []string{"acme", "globex"}}

	t.Run("done key", func(t *testing.T) {
		clk := NewClock(start)
		s := h.open(t, clk)
		d := newDownstream()
		k := idem.Key{Job: "params-done", Period: "2026-10-27"}
		for i := range 3 {
			var res idem.Result
			if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.WithParams(a), idem.ReportTo(&res)); err != nil {
				t.Fatalf("run %d with the same params: %v", i, err)
			}
			if want := map[bool]idem.Outcome{true: idem.Ran, false: idem.AlreadyDone}[i == 0]; res.Outcome != want {
				t.Fatalf("run %d with the same params: outcome %v, want %v", i, res.Outcome, want)
			}
		}
		// The same parameters as a map: the same canonical JSON.
		same := map[string]any{"version": 3, "accounts": []string{"acme", "globex"}, "table": "eur"}
		if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.WithParams(same)); err != nil {
			t.Fatalf("the same params as a map: %v", err)
		}
		before := lookup(t, s, k)
		if len(before.Fingerprint) != 64 {
			t.Fatalf("stored fingerprint %q, want 64 hex digits", before.Fingerprint)
		}
		checkMismatch(t, s, k, before, d, idem.WithClock(clk), idem.WithParams(b))
		var res idem.Result
		if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
			t.Fatalf("no params: %v, outcome %v; want AlreadyDone (no check)", err, res.Outcome)
		}
		if got := d.count(k); got != 1 {
			t.Fatalf("fn ran %d times, want 1", got)
		}
	})

	t.Run("failed key and Reset", func(t *testing.T) {
		clk := NewClock(start)
		s := h.open(t, clk)
		d := newDownstream()
		k := idem.Key{Job: "params-failed", Period: "2026-10-27"}
		fail := func(context.Context) error { return errors.New("bank closed") }
		err := idem.RunOn(ctx, s, k, fail, idem.WithClock(clk), idem.WithParams(a), idem.OneAttempt(),
			idem.WithBackoff(idem.Constant(time.Minute)))
		if !errors.Is(err, idem.ErrBackingOff) {
			t.Fatalf("failing run: %v, want ErrBackingOff", err)
		}
		h.advance(t, s, clk, time.Hour)
		before := lookup(t, s, k)
		checkMismatch(t, s, k, before, d, idem.WithClock(clk), idem.WithParams(b))
		if err := idem.RunOn(ctx, s, k, fail, idem.WithClock(clk), idem.WithParams(a), idem.OneAttempt(),
			idem.WithBackoff(idem.MaxAttempts(1, idem.Constant(time.Minute)))); !errors.Is(err, idem.ErrParked) {
			t.Fatalf("second failing run: %v, want ErrParked", err)
		}
		if err := s.Resolve(ctx, k, idem.ResolveRetry); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if rec := lookup(t, s, k); rec.Fingerprint != before.Fingerprint {
			t.Fatalf("fingerprint after Reset %q, want %q kept", rec.Fingerprint, before.Fingerprint)
		}
		checkMismatch(t, s, k, lookup(t, s, k), d, idem.WithClock(clk), idem.WithParams(b))
		if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.WithParams(a)); err != nil {
			t.Fatalf("run with the first params after Reset: %v", err)
		}
		if rec := lookup(t, s, k); rec.Status != idem.StatusDone || rec.Fingerprint != before.Fingerprint || d.count(k) != 1 {
			t.Fatalf("record %+v, effects %d; want done with the first fingerprint, 1 effect", rec, d.count(k))
		}
	})

	t.Run("bytes", func(t *testing.T) {
		clk := NewClock(start)
		s := h.open(t, clk)
		d := newDownstream()
		k := idem.Key{Job: "params-bytes", Period: "2026-10-27"}
		if err := idem.RunOn(ctx, s, k, d.apply, idem.WithClock(clk), idem.WithParamsBytes([]byte("--rates eur"))); err != nil {
			t.Fatal(err)
		}
		checkMismatch(t, s, k, lookup(t, s, k), d, idem.WithClock(clk), idem.WithParamsBytes([]byte("--rates usd")))
	})
}

// checkMismatch runs k with opts (other params than the stored ones): the
// call must return ErrParamsMismatch naming the key and both short
// fingerprints, run nothing and leave the record as before.
func checkMismatch(t *testing.T, s idemstore.Store, k idem.Key, before idem.Record, d *downstream, opts ...idem.Option) {
	t.Helper()
	n := d.count(k)
	var res idem.Result
	err := idem.RunOn(context.Background(), s, k, d.apply, append(opts, idem.ReportTo(&res))...)
	var me *idemstore.MismatchError
	if !errors.Is(err, idem.ErrParamsMismatch) || !errors.As(err, &me) || res.Outcome != idem.ParamsMismatch {
		t.Fatalf("other params: %v, outcome %v; want ErrParamsMismatch", err, res.Outcome)
	}
	if me.Stored != before.Fingerprint || !strings.Contains(err.Error(), k.String()) ||
		!strings.Contains(err.Error(), idemstore.ShortFingerprint(me.Stored)) || !strings.Contains(err.Error(), idemstore.ShortFingerprint(me.Given)) {
		t.Fatalf("mismatch error %q (stored %q): want the key and both fingerprints, the stored one %q", err, me.Stored, before.Fingerprint)
	}
	if d.count(k) != n {
		t.Fatalf("fn ran on a params mismatch")
	}
	if after := lookup(t, s, k); !reflect.DeepEqual(after, before) {
		t.Fatalf("record after a params mismatch:\n%+v\nwant it unchanged:\n%+v", after, before)
	}
}

func lookup(t *testing.T, s idemstore.Store, k idem.Key) idem.Record {
	t.Helper()
	rec, ok, err := s.Lookup(context.Background(), k)
	if err != nil || !ok {
		t.Fatalf("Lookup %s: %v, found %v", k, err, ok)
	}
	return rec
}

// total is the value the suite's jobs compute.
type total struct {
	Cents int64  `json:"cents"`
	Run   int    `json:"run"`
	URL   string `json:"url"`
}

// testValues: idem.RunValue stores fn's value with the done mark and
// replays it to every later trigger; a crash between fn and the done mark
// recomputes it or leaves none, as the mode says.
func testValues(t *testing.T, h Harness) {
	t.Run("replayed", func(t *testing.T) { valueReplayed(t, h) })
	t.Run("no value", func(t *testing.T) { valueNone(t, h) })
	t.Run("too large", func(t *testing.T) { valueTooLarge(t, h) })
	for _, m := range modes {
		t.Run("crash after fn/"+m.name, func(t *testing.T) { valueCrashAfterFn(t, h, m.name, m.opt) })
	}
	t.Run("crash after fn/RunTx", func(t *testing.T) { valueCrashAfterFnTx(t, h) })
}

// valueReplayed: the value of the first run is stored and replayed to
// every later trigger, fn not run again; a type it does not decode into
// gets ErrValueEncoding, and a plain Run sees the stored bytes.
func valueReplayed(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	k := idem.Key{Job: "value", Period: "2026-10-27"}
	runs := 0
	fn := func(context.Context) (total, error) {
		runs++
		return total{Cents: 1234567, Run: runs, URL: "s3://reports/2026-10-27.pdf"}, nil
	}
	first, err := idem.RunValueOn(ctx, s, k, fn, idem.WithClock(clk))
	if err != nil || first.Run != 1 {
		t.Fatalf("first run: %+v, %v", first, err)
	}
	want, _ := json.Marshal(first)
	for i := range 100 {
		var res idem.Result
		got, err := idem.RunValueOn(ctx, s, k, fn, idem.WithClock(clk), idem.ReportTo(&res))
		if err != nil || got != first || res.Outcome != idem.AlreadyDone || string(res.Value) != string(want) {
			t.Fatalf("trigger %d: %+v, %v, outcome %v, value %s; want %+v, AlreadyDone, %s", i, got, err, res.Outcome, res.Value, first, want)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	if rec := lookup(t, s, k); string(rec.Value) != string(want) {
		t.Fatalf("stored value %s, want %s", rec.Value, want)
	}
	// Another type that the stored value does not decode into.
	type other struct{ Name string }
	if v, err := idem.RunValueOn(ctx, s, k, func(context.Context) (other, error) { return other{"x"}, nil }, idem.WithClock(clk)); !errors.Is(err, idem.ErrValueEncoding) || v != (other{}) {
		t.Fatalf("stored value as another type: %+v, %v; want ErrValueEncoding and the zero value", v, err)
	}
	// A plain Run of the done key sees the stored bytes.
	var res idem.Result
	if err := idem.RunOn(ctx, s, k, func(context.Context) error { return nil }, idem.WithClock(clk), idem.ReportTo(&res)); err != nil || string(res.Value) != string(want) {
		t.Fatalf("Run of the done key: %v, Result.Value %s", err, res.Value)
	}
}

// valueNone: RunValue of a key done by a plain Run, which stored no value,
// gets ErrNoValue.
func valueNone(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	k := idem.Key{Job: "value-none", Period: "2026-10-27"}
	if err := idem.RunOn(ctx, s, k, func(context.Context) error { return nil }, idem.WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	if v, err := idem.RunValueOn(ctx, s, k, func(context.Context) (int, error) { return 7, nil }, idem.WithClock(clk)); !errors.Is(err, idem.ErrNoValue) || v != 0 {
		t.Fatalf("RunValue of a key done by Run: %v, %v; want ErrNoValue", v, err)
	}
}

// valueTooLarge: a value over idemstore.MaxValue parks the key, storing
// no value, with an error naming it.
func valueTooLarge(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	k := idem.Key{Job: "value-large", Period: "2026-10-27"}
	big := strings.Repeat("x", idemstore.MaxValue)
	_, err := idem.RunValueOn(ctx, s, k, func(context.Context) (string, error) { return big, nil }, idem.WithClock(clk))
	if !errors.Is(err, idem.ErrValueTooLarge) || !errors.Is(err, idem.ErrParked) || !strings.Contains(err.Error(), k.String()) {
		t.Fatalf("a value too large: %v; want ErrValueTooLarge, parked, naming the key", err)
	}
	if rec := lookup(t, s, k); rec.Status != idem.StatusParked || rec.Value != nil {
		t.Fatalf("record %+v; want parked, no value", rec)
	}
}

// valueCrashAfterFn: after a crash between fn and the done mark, in the
// mode named mode (its option opt), the recovery recomputes the value
// (at-least-once), leaves the key unknown and, resolved done, with no
// value (at-most-once), or recovers it from the downstream with no value
// (two-phase); a recomputed value is replayed from then on.
func valueCrashAfterFn(t *testing.T, h Harness, mode string, opt func(idem.DownstreamHas) idem.Option) {
	ctx := context.Background()
	clk := NewClock(start)
	s := h.open(t, clk)
	d := newDownstream()
	k := idem.Key{Job: "value-crash", Period: "2026-10-27"}
	runs := 0
	fn := func(ctx context.Context) (total, error) {
		runs++
		return total{Cents: 100, Run: runs}, d.apply(ctx)
	}
	opts := []idem.Option{idem.WithClock(clk), opt(d.has)}
	if _, err := idem.RunValueOn(CrashAt(ctx, idemstore.AfterFn), s, k, fn, opts...); !errors.Is(err, ErrCrashed) {
		t.Fatalf("crashing run: %v", err)
	}
	h.expire(t, s, clk)
	var res idem.Result
	v, err := idem.RunValueOn(ctx, s, k, fn, append(opts, idem.ReportTo(&res))...)
	switch mode {
	case "at-least-once": // fn runs again: the value is the new run's
		if err != nil || v.Run != 2 || res.Outcome != idem.Ran {
			t.Fatalf("recovery: %+v, %v, %v; want run 2's value", v, err, res.Outcome)
		}
	case "at-most-once": // unknown; resolved as done by a person, it has no value
		if !errors.Is(err, idem.ErrUnknownOutcome) || runs != 1 {
			t.Fatalf("recovery: %v after %d runs; want ErrUnknownOutcome, 1 run", err, runs)
		}
		if err := s.Resolve(ctx, k, idem.ResolveDone); err != nil {
			t.Fatal(err)
		}
		if _, err := idem.RunValueOn(ctx, s, k, fn, opts...); !errors.Is(err, idem.ErrNoValue) {
			t.Fatalf("after Resolve: %v, want ErrNoValue", err)
		}
		return
	case "two-phase": // the downstream has it: recovered, without a value
		if !errors.Is(err, idem.ErrNoValue) || res.Outcome != idem.Recovered || runs != 1 {
			t.Fatalf("recovery: %v, %v after %d runs; want ErrNoValue, Recovered, 1 run", err, res.Outcome, runs)
		}
		return
	}
	for i := range 3 {
		got, err := idem.RunValueOn(ctx, s, k, fn, opts...)
		if err != nil || got != v {
			t.Fatalf("trigger %d after recovery: %+v, %v; want %+v", i, got, err, v)
		}
	}
}

// valueCrashAfterFnTx: a RunTx value whose transaction a crash rolled
// back was never stored: the recovery runs fn again, and its value is
// replayed from then on.
func valueCrashAfterFnTx(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(start)
	st, ok := h.open(t, clk).(idemstore.TxStore[*sql.Tx])
	if !ok {
		t.Skip("the store is not an idemstore.TxStore[*sql.Tx]")
	}
	s := idem.TxStoreOf(st)
	k := idem.Key{Job: "value-tx", Period: "2026-10-27"}
	runs := 0
	fn := func(context.Context, *sql.Tx) (total, error) { runs++; return total{Cents: 5, Run: runs}, nil }
	if _, err := idem.RunTxValue(CrashAt(ctx, idemstore.AfterFn), s, k, fn, idem.WithClock(clk)); !errors.Is(err, ErrCrashed) {
		t.Fatalf("crashing run: %v", err)
	}
	h.expire(t, st, clk)
	v, err := idem.RunTxValue(ctx, s, k, fn, idem.WithClock(clk))
	if err != nil || v.Run != 2 {
		t.Fatalf("recovery: %+v, %v; want run 2's value (the crashed transaction stored none)", v, err)
	}
	for i := range 100 {
		got, err := idem.RunTxValue(ctx, s, k, fn, idem.WithClock(clk))
		if err != nil || got != v {
			t.Fatalf("trigger %d: %+v, %v; want %+v", i, got, err, v)
		}
	}
	if runs != 2 {
		t.Fatalf("fn ran %d times, want 2", runs)
	}
}
