package idemotel_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"go.opentelemetry.io/otel/codes"
)

// TestCrashAndRetryLinked: the crash kit's hooks (idemstore.WithTrace)
// and the Telemetry's (idemstore.WithSpans) in one context both work: at
// every crash point the run stops there, and the recovery's attempt is
// traced. Where the crashed attempt had started (its fn ran: after-fn,
// after-done), the recovery's attempt links to the crashed one's span and
// names it in idem.previous_attempt; the crashed run's span records the
// crash as an error.
func TestCrashAndRetryLinked(t *testing.T) {
	idemtest.EveryCrashPoint(t, func(t *testing.T, c *idemtest.Crash) {
		r := newRig(t)
		l := openLedger(t)
		key := idem.Key{Job: "crashy", Period: "p1"}
		job := func(ctx context.Context) error {
			return l.Run(r.tel.Context(ctx), key, func(context.Context) error { return nil }, c.Option())
		}
		reached, err := c.Crash(job)
		if !reached {
			t.Skipf("the Ledger does not reach %s", c.Point)
		}
		if err != nil {
			t.Fatalf("the crash at %s: %v", c.Point, err)
		}
		crashed := r.spans("idem.Run crashy")
		if len(crashed) != 1 || crashed[0].Status().Code != codes.Error {
			t.Fatalf("the crashed run's span: %v (spans %v)", crashed, r.names())
		}
		before := r.spans("attempt crashy")
		if err := c.Recover(job); err != nil {
			t.Fatalf("recover: %v", err)
		}
		runs := r.spans("idem.Run crashy")
		if c.Point == idemtest.AfterDone {
			// The recovery finds the key done: a duplicate, no span of
			// its own (TestDuplicateEvent).
			if len(runs) != 1 {
				t.Fatalf("run spans %v after a recovery that found the key done", r.names())
			}
			return
		}
		if len(runs) != 2 {
			t.Fatalf("run spans %v", r.names())
		}
		atts := r.spans("attempt crashy")
		if len(atts) != len(before)+1 {
			t.Fatalf("attempt spans before the recovery %d, after %d", len(before), len(atts))
		}
		rec := atts[len(atts)-1]
		wantParent(t, rec, runs[1])
		if len(before) == 0 {
			// The crash came before fn: no span to link to.
			if len(rec.Links()) != 0 {
				t.Fatalf("links %v with no crashed attempt span", rec.Links())
			}
			return
		}
		crashedAttempt := before[0]
		if len(rec.Links()) != 1 || rec.Links()[0].SpanContext.SpanID() != crashedAttempt.SpanContext().SpanID() {
			t.Fatalf("the recovery's links %v, want the crashed attempt %s", rec.Links(), crashedAttempt.SpanContext().SpanID())
		}
		prev, _ := attr(crashedAttempt, "idem.attempt")
		wantAttrs(t, rec, KeyPrevious(prev.AsInt64()))
		if tk, _ := attr(rec, "idem.takeover"); !tk.AsBool() {
			t.Fatalf("the recovery's idem.takeover is not set: %v", rec.Attributes())
		}
	})
}
