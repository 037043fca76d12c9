package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testledger"
	"github.com/idemgo/idem/outbox"
)

// copyTestdata copies testdata/name into a new temporary directory and
// returns its path there.
func copyTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkUpgraded: the three records that the old version wrote
// (daily_settle 2026-10-26 and 2026-10-27 done, 2026-10-28 failed with
// "bank closed") are there, without fingerprint or value, and the store
// takes both from then on.
func checkUpgraded(t *testing.T, s idem.Store) {
	t.Helper()
	ctx := context.Background()
	done := idem.Key{Job: "daily_settle", Period: "2026-10-27"}
	rec, ok, err := s.Lookup(ctx, done)
	if err != nil || !ok || rec.Status != idem.StatusDone || rec.Fingerprint != "" || rec.Value != nil {
		t.Fatalf("upgraded done record: %+v, %v, %v", rec, ok, err)
	}
	failed := idem.Key{Job: "daily_settle", Period: "2026-10-28"}
	if rec, ok, err := s.Lookup(ctx, failed); err != nil || !ok || rec.Status != idem.StatusFailed || rec.LastError != "bank closed" || rec.Failures != 1 {
		t.Fatalf("upgraded failed record: %+v, %v, %v", rec, ok, err)
	}
	var res idem.Result
	if err := idem.RunOn(ctx, s, done, func(context.Context) error { return errors.New("ran") },
		idem.WithParams("rates-v9"), idem.ReportTo(&res)); err != nil || res.Outcome != idem.AlreadyDone {
		t.Fatalf("Run of an upgraded done key with params: %v, %v; want AlreadyDone (no check)", err, res.Outcome)
	}
	if _, err := idem.RunValueOn(ctx, s, done, func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, idem.ErrNoValue) {
		t.Fatalf("RunValue of an upgraded done key: %v, want ErrNoValue", err)
	}
	// The failed period, run now with params, takes them and a value.
	v, err := idem.RunValueOn(ctx, s, failed, func(context.Context) (string, error) { return "EUR 1,234.56", nil },
		idem.WithParams("rates-v9"), idem.WithBackoff(idem.Constant(0)))
	if err != nil && !errors.Is(err, idem.ErrBackingOff) {
		t.Fatalf("RunValue of the upgraded failed key: %v", err)
	}
	if err != nil {
		// Its backoff, from the old version's run, still holds: resolve it.
		if err := s.Resolve(ctx, failed, idem.ResolveRetry); err != nil {
			t.Fatal(err)
		}
		if v, err = idem.RunValueOn(ctx, s, failed, func(context.Context) (string, error) { return "EUR 1,234.56", nil },
			idem.WithParams("rates-v9")); err != nil {
			t.Fatalf("RunValue after Reset: %v", err)
		}
	}
	if v != "EUR 1,234.56" {
		t.Fatalf("value %q", v)
	}
	if _, err := idem.RunValueOn(ctx, s, failed, func(context.Context) (string, error) { return "", nil },
		idem.WithParams("rates-v10")); !errors.Is(err, idem.ErrParamsMismatch) {
		t.Fatalf("other params: %v, want ErrParamsMismatch", err)
	}
	if got, err := idem.RunValueOn(ctx, s, failed, func(context.Context) (string, error) { return "", nil }); err != nil || got != v {
		t.Fatalf("duplicate trigger: %q, %v; want %q", got, err, v)
	}
}

// TestLedgerUpgradeFromVersion3: a ledger file that version 3 wrote
// (testdata/ledger-v3.db) opens, is upgraded to this version, and keeps
// every record.
func TestLedgerUpgradeFromVersion3(t *testing.T) {
	t.Parallel()
	p := copyTestdata(t, "ledger-v3.db")
	l, err := idem.OpenLedger(p)
	if err != nil {
		t.Fatalf("OpenLedger of a version-3 ledger: %v", err)
	}
	defer l.Close()
	var v int
	if err := l.DB().QueryRow(`SELECT value FROM idem_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != idem.SchemaVersion {
		t.Fatalf("version %d, %v; want %d", v, err, idem.SchemaVersion)
	}
	if recs, err := l.List(context.Background(), idem.Filter{}); err != nil || len(recs) != 3 {
		t.Fatalf("List: %d records, %v; want 3", len(recs), err)
	}
	checkUpgraded(t, l)
}

// TestLedgerUpgradeFromVersion4: a ledger file that version 4 wrote
// (testdata/ledger-v4.db: no outbox) opens, is upgraded to version 5 with
// its records and business table kept, and its outbox works.
func TestLedgerUpgradeFromVersion4(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := copyTestdata(t, "ledger-v4.db")
	l, err := idem.OpenLedger(p)
	if err != nil {
		t.Fatalf("OpenLedger of a version-4 ledger: %v", err)
	}
	defer l.Close()
	var v int
	if err := l.DB().QueryRow(`SELECT value FROM idem_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != idem.SchemaVersion {
		t.Fatalf("version %d, %v; want 5", v, err)
	}
	recs, err := l.List(ctx, idem.Filter{})
	if err != nil || len(recs) != 2 || recs[0].Key.Job != "notify" || recs[0].Status != idem.StatusFailed || recs[1].Status != idem.StatusDone {
		t.Fatalf("List: %+v, %v", recs, err)
	}
	var total int
	if err := l.DB().QueryRow(`SELECT total FROM settlements WHERE day = '2026-10-27'`).Scan(&total); err != nil || total != 42 {
		t.Fatalf("business row: %d, %v", total, err)
	}
	key := idem.Key{Job: "settle", Period: "2026-10-28"}
	err = l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "settlements", Payload: []byte("2026-10-28")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var c testledger.Collect
	if res, err := outbox.RelayOnce(ctx, l, &c); err != nil || res.Delivered != 1 || c.Got[0].ID != key.RequestID()+"-0" {
		t.Fatalf("relay on the upgraded ledger: %+v, %v, %+v", res, err, c.Got)
	}
}

// TestStateFileUpgradeFromVersion1: a version-1 state file
// (testdata/state-v1.json) is read, and written back as version 2 at its
// first change.
func TestStateFileUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	p := copyTestdata(t, "state-v1.json")
	s, err := idem.OpenStateFile(p)
	if err != nil {
		t.Fatalf("OpenStateFile of a version-1 file: %v", err)
	}
	checkUpgraded(t, s)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"version": 2`, `"doneFingerprint": "`, `"doneValue": "`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Fatalf("state file lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `"version": 1`) {
		t.Fatalf("state file still says version 1:\n%s", b)
	}
}

// TestParamsEveryCall: RunTx, CatchUp, CatchUpTx, Each and EachTx check the
// key's fingerprint as Run does: other params → ErrParamsMismatch, nothing
// runs, nothing is written.
func TestParamsEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	a, b := idem.WithParams(map[string]int{"rates": 3}), idem.WithParams(map[string]int{"rates": 4})
	mismatch := func(what string, err error) {
		t.Helper()
		var e *idem.Error
		if !errors.Is(err, idem.ErrParamsMismatch) || !errors.As(err, &e) || e.Outcome != idem.ParamsMismatch {
			t.Fatalf("%s with other params: %v; want ErrParamsMismatch", what, err)
		}
	}
	ran := func(what string) func(context.Context) error {
		return func(context.Context) error { t.Fatalf("%s ran with other params", what); return nil }
	}

	k := idem.Key{Job: "tx", Period: "2026-10-27"}
	if err := l.RunTx(ctx, k, func(context.Context, *sql.Tx) error { return nil }, a); err != nil {
		t.Fatal(err)
	}
	mismatch("RunTx", l.RunTx(ctx, k, func(context.Context, *sql.Tx) error { return ran("RunTx")(ctx) }, b))

	// A period that a Run claimed with a: the catch-up that reaches it with b stops there.
	clk := idemtest.NewClock(day(3))
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-02"}, func(context.Context) error { return nil }, a); err != nil {
		t.Fatal(err)
	}
	before := mustLookup(t, l, idem.Key{Job: "settle", Period: "2026-10-02"})
	_, err := idem.CatchUp(ctx, l, "settle", daily, func(context.Context, idem.Period) error { return ran("CatchUp")(ctx) },
		idem.WithClock(clk), idem.Since(day(1)), b)
	mismatch("CatchUp", err)
	_, err = idem.CatchUpTx(ctx, l, "settle", daily, func(context.Context, *sql.Tx, idem.Period) error { return ran("CatchUpTx")(ctx) },
		idem.WithClock(clk), idem.Since(day(1)), b)
	mismatch("CatchUpTx", err)
	// A duplicate trigger of a catch-up, with nothing due, checks the latest due period.
	if _, err := idem.CatchUp(ctx, l, "daily", daily, func(context.Context, idem.Period) error { return nil },
		idem.WithClock(clk), a); err != nil {
		t.Fatal(err)
	}
	res, err := idem.CatchUp(ctx, l, "daily", daily, func(context.Context, idem.Period) error { return ran("CatchUp")(ctx) },
		idem.WithClock(clk), b)
	mismatch("a duplicate CatchUp", err)
	if len(res.Periods) != 1 || res.Periods[0].Period.Name != "2026-10-03" || res.Periods[0].Outcome != idem.ParamsMismatch {
		t.Fatalf("duplicate CatchUp with other params: %+v; want the latest due period, params mismatch", res.Periods)
	}
	if res, err := idem.CatchUp(ctx, l, "daily", daily, func(context.Context, idem.Period) error { return ran("CatchUp")(ctx) }, idem.WithClock(clk)); err != nil || len(res.Periods) != 0 {
		t.Fatalf("duplicate CatchUp without params: %+v, %v; want nothing due", res, err)
	}
	if after := mustLookup(t, l, before.Key); !reflect.DeepEqual(after, before) {
		t.Fatalf("record changed: %+v → %+v", before, after)
	}

	p := idem.Key{Job: "points", Period: "2026-10-27"}
	if _, err := idem.Each(ctx, l, p, accounts(3), func(context.Context, string) error { return nil }, a); err != nil {
		t.Fatal(err)
	}
	_, err = idem.Each(ctx, l, p, accounts(3), func(context.Context, string) error { return ran("Each")(ctx) }, b)
	mismatch("Each", err)
	_, err = idem.EachTx(ctx, l, p, accounts(3), func(context.Context, *sql.Tx, string) error { return ran("EachTx")(ctx) }, b)
	mismatch("EachTx", err)
}

// TestWithParamsInvalid: parameters that encoding/json cannot encode are
// refused before anything is written.
func TestWithParamsInvalid(t *testing.T) {
	t.Parallel()
	l := openLedger(t, t.TempDir())
	k := idem.Key{Job: "bad-params", Period: "2026-10-27"}
	err := l.Run(context.Background(), k, func(context.Context) error { t.Fatal("fn ran"); return nil }, idem.WithParams(make(chan int)))
	if !errors.Is(err, idem.ErrInvalidOption) || !strings.Contains(err.Error(), "WithParams(chan int)") {
		t.Fatalf("WithParams(chan int): %v; want ErrInvalidOption naming it", err)
	}
	if _, ok, err := l.Lookup(context.Background(), k); ok || err != nil {
		t.Fatalf("a record was written (%v)", err)
	}
}

// TestStateFileKeepsLastDoneOnly: the state file keeps the fingerprint and
// the value of a job's last done period only; an older period, done by
// the watermark, has neither: no check, ErrNoValue.
func TestStateFileKeepsLastDoneOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := idem.OpenStateFile(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := idem.WithParams("rates-v3"), idem.WithParams("rates-v4")
	k26, k27 := idem.Key{Job: "report", Period: "2026-10-26"}, idem.Key{Job: "report", Period: "2026-10-27"}
	for _, k := range []idem.Key{k26, k27} {
		if _, err := idem.RunValueOn(ctx, s, k, func(context.Context) (string, error) { return "url-" + k.Period, nil }, a); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := idem.RunValueOn(ctx, s, k27, func(context.Context) (string, error) { return "", nil }, a); err != nil || v != "url-2026-10-27" {
		t.Fatalf("last done period: %q, %v", v, err)
	}
	if _, err := idem.RunValueOn(ctx, s, k27, func(context.Context) (string, error) { return "", nil }, b); !errors.Is(err, idem.ErrParamsMismatch) {
		t.Fatalf("last done period, other params: %v, want ErrParamsMismatch", err)
	}
	if _, err := idem.RunValueOn(ctx, s, k26, func(context.Context) (string, error) { return "", nil }, b); !errors.Is(err, idem.ErrNoValue) {
		t.Fatalf("older done period, other params: %v; want ErrNoValue (no check, no value kept)", err)
	}
}
