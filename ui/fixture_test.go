package ui_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

// The payloads that must show as text.
const (
	xssJob   = "<script>alert(1)</script>"
	xssError = `<img src=x onerror=alert(2)>`
	xssBody  = `<b onmouseover=alert(4)>hi</b>`
)

// fixture is a real SQLite ledger filled by real Runs:
//
//	settle 2026-10-20..25  done (25 with a stored value)
//	settle 2026-10-26      failed, backing off
//	settle 2026-10-27      parked (Permanent)
//	pay    2026-10-27      unknown (AtMostOnce, fn failed)
//	grant  2026-10-27      a fan-out: items a and b done, c parked
//	notify 2026-10-27      done, with 3 outbox messages: mail #0 delivered, mail #1 failing, hooks #0 parked
//	<script>... 2026-10-27 failed with an error that is HTML
//	xss 2026-10-27         done with a stored value that is HTML
type fixture struct {
	ledger *idem.Ledger
	path   string
	parked string // the id of the parked outbox message
	failed string // the id of the failing one
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureAt(t, filepath.Join(t.TempDir(), "ledger.db"), false)
}

// newFixtureAt writes the fixture's ledger at path. For screenshots (shots)
// it has all of October for settle and none of the HTML payloads.
func newFixtureAt(t *testing.T, path string, shots bool) *fixture {
	t.Helper()
	ctx := context.Background()
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := &fixture{ledger: l, path: path}
	start := time.Now()
	step := func(what string) { t.Logf("fixture: %s at %s", what, time.Since(start)) }
	ok := func(context.Context) error { return nil }
	// A failure backs off for an hour, with no retry in the call.
	noWait := []idem.Option{idem.RetryWithin(0), idem.WithBackoff(idem.Constant(time.Hour))}
	first := 20
	if shots {
		first = 1
	}
	for d := first; d <= 24; d++ {
		if err := l.Run(ctx, idem.Key{Job: "settle", Period: fmt.Sprintf("2026-10-%02d", d)}, ok, idem.WithParams(map[string]int{"day": d})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := idem.RunValueOn(ctx, l, idem.Key{Job: "settle", Period: "2026-10-25"}, func(context.Context) (map[string]int, error) {
		return map[string]int{"total": 1200}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-26"}, func(context.Context) error {
		return errors.New("bank timeout")
	}, noWait...); err == nil {
		t.Fatal("a failing Run returned nil")
	}
	if err := l.Run(ctx, idem.Key{Job: "settle", Period: "2026-10-27"}, func(context.Context) error {
		return idem.Permanent(errors.New("account closed"))
	}); err == nil {
		t.Fatal("a Permanent Run returned nil")
	}
	if err := l.Run(ctx, idem.Key{Job: "pay", Period: "2026-10-27"}, func(context.Context) error {
		return errors.New("connection reset while paying")
	}, idem.AtMostOnce()); !errors.Is(err, idem.ErrUnknownOutcome) {
		t.Fatalf("AtMostOnce failure: %v, want ErrUnknownOutcome", err)
	}
	step("runs")
	items := idem.Items(slices.Values([]string{"a", "b", "c"}))
	if _, err := idem.Each(ctx, l, idem.Key{Job: "grant", Period: "2026-10-27"}, items, func(_ context.Context, item string) error {
		if item == "c" {
			return idem.Permanent(errors.New("no such account"))
		}
		return nil
	}); err != nil {
		t.Logf("idem.Each: %v", err)
	}
	step("each")
	if err := l.RunTx(ctx, idem.Key{Job: "notify", Period: "2026-10-27"}, func(ctx context.Context, tx *sql.Tx) error {
		for _, m := range []outbox.Message{{Topic: "mail", Payload: []byte("first")}, {Topic: "mail", Payload: []byte(xssBody)}, {Topic: "hooks", Payload: []byte("hook")}} {
			if _, err := outbox.Put(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	deliver := outbox.DeliverFunc(func(ctx context.Context, d outbox.Delivery) error {
		switch {
		case d.Topic == "hooks":
			f.parked = d.ID
			return idem.Permanent(errors.New("410 gone: " + xssError))
		case string(d.Payload) == xssBody:
			f.failed = d.ID
			return errors.New("503 unavailable")
		}
		return nil
	})
	if _, err := outbox.RelayOnce(ctx, l, deliver, outbox.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))); err != nil {
		t.Logf("relay: %v", err)
	}
	step("relay")
	if f.parked == "" || f.failed == "" {
		t.Fatalf("the relay did not deliver every topic: parked %q, failing %q", f.parked, f.failed)
	}
	if shots {
		return f
	}
	if err := l.Run(ctx, idem.Key{Job: xssJob, Period: "2026-10-27"}, func(context.Context) error {
		return errors.New(xssError)
	}, noWait...); err == nil {
		t.Fatal("a failing Run returned nil")
	}
	if _, err := idem.RunValueOn(ctx, l, idem.Key{Job: "xss", Period: "2026-10-27"}, func(context.Context) (string, error) {
		return "<script>alert(3)</script>", nil
	}); err != nil {
		t.Fatal(err)
	}
	// What the tests rely on.
	for k, want := range map[idem.Key]idem.Status{
		{Job: "settle", Period: "2026-10-25"}: idem.StatusDone,
		{Job: "settle", Period: "2026-10-26"}: idem.StatusFailed,
		{Job: "settle", Period: "2026-10-27"}: idem.StatusParked,
		{Job: "pay", Period: "2026-10-27"}:    idem.StatusUnknown,
		{Job: "grant", Period: "2026-10-27"}:  idem.StatusDone,
		{Job: xssJob, Period: "2026-10-27"}:   idem.StatusFailed,
	} {
		if got := f.status(t, k); got != want {
			t.Fatalf("fixture: %s is %q, want %s", k, got, want)
		}
	}
	return f
}

// EnvFixture names where TestWriteFixture writes the fixture's ledger
// (scripts/screenshots.sh); without it the test is skipped.
const EnvFixture = "IDEM_UI_FIXTURE"

// TestWriteFixture writes the screenshots' ledger at $IDEM_UI_FIXTURE.
func TestWriteFixture(t *testing.T) {
	path := os.Getenv(EnvFixture)
	if path == "" {
		t.Skip("$" + EnvFixture + " is not set: scripts/screenshots.sh sets it to write the screenshots' ledger")
	}
	f := newFixtureAt(t, path, true)
	if err := f.ledger.Close(); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) status(t *testing.T, k idem.Key) idem.Status {
	t.Helper()
	rec, ok, err := f.ledger.Lookup(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return ""
	}
	return rec.Status
}

// has reports whether s contains every one of subs.
func has(s string, subs ...string) string {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return sub
		}
	}
	return ""
}
