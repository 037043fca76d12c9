package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// TestInvalidKeyErrorIsShort: an invalid key of 10 KB (or of 10 KB of NUL
// bytes, each escaped as 4 characters) is named in the error by its first
// bytes and its length, not echoed whole.
func TestInvalidKeyErrorIsShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t, t.TempDir())
	s := openState(t, t.TempDir())
	long := strings.Repeat("x", 10240)
	nul := strings.Repeat("\x00", 10240)
	fn := func(context.Context) error { t.Error("fn ran"); return nil }
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Validate, long job", func() error { return idem.Key{Job: long, Period: "2026-10-27"}.Validate() }},
		{"Validate, NUL period", func() error { return idem.Key{Job: "j", Period: nul}.Validate() }},
		{"Validate, both", func() error { return idem.Key{Job: nul, Period: long}.Validate() }},
		{"ValidateJob, NUL", func() error { return idemstore.ValidateJob(nul) }},
		{"ledger Run", func() error { return l.Run(ctx, idem.Key{Job: long, Period: nul}, fn) }},
		{"state file Run", func() error { return s.Run(ctx, idem.Key{Job: nul, Period: "2026-10-27"}, fn) }},
		{"Resolve", func() error { return l.Resolve(ctx, idem.Key{Job: "j", Period: nul}, idem.ResolveDone) }},
		{"CatchUp", func() error {
			_, err := idem.CatchUp(ctx, l, nul, idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
			return err
		}},
		{"Each", func() error {
			_, err := idem.Each(ctx, l, idem.Key{Job: long, Period: "2026-10-27"}, func(yield func(string, error) bool) { yield("a", nil) },
				func(context.Context, string) error { return nil })
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, idem.ErrInvalidKey) {
				t.Fatalf("%v, want ErrInvalidKey", err)
			}
			msg := err.Error()
			if len(msg) > 800 || !strings.Contains(msg, "(10240 bytes)") {
				t.Fatalf("message of %d bytes, want at most 800 naming the length (10240 bytes): %.300q", len(msg), msg)
			}
		})
	}
	// A short key is quoted whole, escaped.
	err := idem.Key{Job: "job\n", Period: "2026-10-27"}.Validate()
	if want := `idem: invalid key "job\n"/"2026-10-27": job has a control character U+000A at byte 3`; err == nil || err.Error() != want {
		t.Fatalf("%v, want %s", err, want)
	}
	// A multi-byte character is not cut in half.
	err = idem.Key{Job: strings.Repeat("é", 300), Period: "p"}.Validate()
	if err == nil || !strings.Contains(err.Error(), `"`+strings.Repeat("é", 32)+`"… (600 bytes)`) {
		t.Fatalf("%v, want 32 whole é and the length", err)
	}
}

// TestRequestIDPeriodAndItemDiffer: an item's request id (item format 2) is
// domain-separated from every period's (format 1): item "acct-7" of period
// "2026-10-27" and the period "2026-10-27/acct-7" of the same job get
// different ids, in fn's Info (Run, Each, EachTx), in a TwoPhase check of
// the item, and from the Key methods. Both formats are pinned by golden
// values (computed outside Go: "idem-" + the first 32 hex digits of
// SHA-256 of the bytes below), so that neither changes unnoticed: a changed
// id is a new idempotency key downstream.
func TestRequestIDPeriodAndItemDiffer(t *testing.T) {
	t.Parallel()
	const (
		periodID = "idem-c0adeac731caa213d606d222473d9a2c" // "points" 0x00 "2026-10-27/acct-7"
		itemID   = "idem-b80d900b316a4917fa022a6fcbc3d5c9" // "idem item request id v2" 0x00 "points" 0x00 "2026-10-27" 0x00 "acct-7"
		ownID    = "idem-38441b3f3e62bc26896e61f72e876a4a" // "points" 0x00 "2026-10-27"
	)
	ctx := context.Background()
	period := idem.Key{Job: "points", Period: "2026-10-27"}
	slash := idem.Key{Job: "points", Period: "2026-10-27/acct-7"}
	if got := slash.RequestID(); got != periodID {
		t.Errorf("RequestID of %v = %s, want %s (format 1)", slash, got, periodID)
	}
	if got := period.RequestID(); got != ownID {
		t.Errorf("RequestID of %v = %s, want %s (format 1)", period, got, ownID)
	}
	if got := period.ItemRequestID("acct-7"); got != itemID {
		t.Errorf("ItemRequestID of %v, acct-7 = %s, want %s (item format 2)", period, got, itemID)
	}

	l := openLedger(t, t.TempDir())
	if err := l.Run(ctx, slash, func(ctx context.Context) error {
		if info, _ := idem.InfoFrom(ctx); info.RequestID != periodID {
			t.Errorf("Run of %v: Info.RequestID %s, want %s", slash, info.RequestID, periodID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	one := idem.Items(func(yield func(string) bool) { yield("acct-7") })
	check := func(call string) func(ctx context.Context) {
		return func(ctx context.Context) {
			info, _ := idem.InfoFrom(ctx)
			if info.Item != "acct-7" || info.RequestID != itemID {
				t.Errorf("%s: Info %+v, want item acct-7 with request id %s", call, info, itemID)
			}
		}
	}
	// Each: fn fails once, so TwoPhase's check is asked about the item; it
	// answers "there", and the item is done without a second fn.
	var fns, checks int
	has := func(ctx context.Context, k idem.Key) (bool, error) {
		checks++
		check("TwoPhase check")(ctx)
		return true, nil
	}
	res, err := idem.Each(ctx, l, period, one, func(ctx context.Context, item string) error {
		fns++
		check("Each")(ctx)
		return errors.New("timeout: the request may have reached the downstream")
	}, idem.TwoPhase(has))
	if err != nil || res.Counts.Done != 1 || fns != 1 || checks != 1 {
		t.Fatalf("Each: %v, %+v; fn ran %d times, check %d (want 1, 1)", err, res, fns, checks)
	}
	l2 := openLedger(t, t.TempDir())
	res, err = idem.EachTx(ctx, l2, period, one, func(ctx context.Context, _ *sql.Tx, item string) error {
		check("EachTx")(ctx)
		return nil
	})
	if err != nil || res.Counts.Done != 1 {
		t.Fatalf("EachTx: %v, %+v", err, res)
	}
}
