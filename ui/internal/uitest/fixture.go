// Package uitest holds what the ui module's tests share with its browser
// tests (ui/browsertest, a module of its own): a ledger filled by real Runs
// with every kind of record the pages show, a handler as the tests build
// it, and the checks they make. It is internal: no user of the module
// imports it.
package uitest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	XSSJob   = "<script>alert(1)</script>"
	XSSError = `<img src=x onerror=alert(2)>`
	XSSBody  = `<b onmouseover=alert(4)>hi</b>`
)

// Fixture is a real SQLite ledger filled by real Runs:
//
//	settle 2026-10-20..25  done (25 with a stored value)
//	settle 2026-10-26      failed, backing off
//	settle 2026-10-27      parked (Permanent)
//	pay    2026-10-27      unknown (AtMostOnce, fn failed)
//	grant  2026-10-27      a fan-out: items a and b done, c parked
//	notify 2026-10-27      done, with 3 outbox messages: mail #0 delivered, mail #1 failing, hooks #0 parked
//	<script>... 2026-10-27 failed with an error that is HTML
//	xss 2026-10-27         done with a stored value that is HTML
type Fixture struct {
	Ledger *idem.Ledger
	Path   string
	Parked string // the id of the parked outbox message
	Failed string // the id of the failing one
}

// NewFixture writes the fixture's ledger in t's temporary directory.
func NewFixture(t *testing.T) *Fixture {
	t.Helper()
	return NewFixtureAt(t, filepath.Join(t.TempDir(), "ledger.db"), false)
}

// NewFixtureAt writes the fixture's ledger at path. For screenshots (shots)
// it has all of October for settle and none of the HTML payloads.
func NewFixtureAt(t *testing.T, path string, shots bool) *Fixture {
	t.Helper()
	ctx := context.Background()
	l, err := idem.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := &Fixture{Ledger: l, Path: path}
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
		for _, m := range []outbox.Message{{Topic: "mail", Payload: []byte("first")}, {Topic: "mail", Payload: []byte(XSSBody)}, {Topic: "hooks", Payload: []byte("hook")}} {
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
			f.Parked = d.ID
			return idem.Permanent(errors.New("410 gone: " + XSSError))
		case string(d.Payload) == XSSBody:
			f.Failed = d.ID
			return errors.New("503 unavailable")
		}
		return nil
	})
	if _, err := outbox.RelayOnce(ctx, l, deliver, outbox.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))); err != nil {
		t.Logf("relay: %v", err)
	}
	step("relay")
	if f.Parked == "" || f.Failed == "" {
		t.Fatalf("the relay did not deliver every topic: parked %q, failing %q", f.Parked, f.Failed)
	}
	if shots {
		return f
	}
	if err := l.Run(ctx, idem.Key{Job: XSSJob, Period: "2026-10-27"}, func(context.Context) error {
		return errors.New(XSSError)
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
		{Job: XSSJob, Period: "2026-10-27"}:   idem.StatusFailed,
	} {
		if got := f.Status(t, k); got != want {
			t.Fatalf("fixture: %s is %q, want %s", k, got, want)
		}
	}
	return f
}

// Status is k's status in the fixture's ledger, "" when it has no record.
func (f *Fixture) Status(t *testing.T, k idem.Key) idem.Status {
	t.Helper()
	rec, ok, err := f.Ledger.Lookup(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return ""
	}
	return rec.Status
}

// Has returns the first of subs that s does not contain, "" when it
// contains every one.
func Has(s string, subs ...string) string {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return sub
		}
	}
	return ""
}
