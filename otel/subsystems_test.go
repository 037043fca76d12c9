package idemotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/schedtest"
	"github.com/idemgo/idem/internal/testwait"
	idemotel "github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/outbox"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestCatchUpSpans: a catch-up pass is a span; each period's Run is a
// child of it, and the period's attempt a child of that.
func TestCatchUpSpans(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(context.Background())
	res, err := idem.CatchUp(ctx, l, "daily", idem.Daily(time.UTC), func(context.Context, idem.Period) error { return nil })
	if err != nil || len(res.Periods) != 1 {
		t.Fatalf("catch-up: %+v, %v", res, err)
	}
	pass := r.one(t, "catchup daily")
	run := r.one(t, "idem.Run daily")
	att := r.one(t, "attempt daily")
	wantParent(t, run, pass)
	wantParent(t, att, run)
	wantAttrs(t, pass, idemotel.KeyJob.String("daily"), idemotel.KeyCall.String("idem.CatchUp"), idemotel.KeyPeriods.Int(1))
	wantAttrs(t, run, idemotel.KeyPeriod.String(res.Periods[0].Period.Name), idemotel.KeyOutcome.String("ran"))
	if _, ok := attr(pass, idemotel.KeyPeriod); ok {
		t.Fatalf("the pass has a period: %v", pass.Attributes())
	}
}

// TestEachSpans: a fan-out call is a span with its workers; each chunk a
// worker claimed is a child span with its items and attempt, and fn's
// context is its chunk's; the period's done mark is a Run inside the call.
func TestEachSpans(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(context.Background())
	key := idem.Key{Job: "grant", Period: "2026-12-01"}
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprintf("acct-%02d", i))
	}
	tracer := r.tp.Tracer("app")
	res, err := idem.Each(ctx, l, key, idem.Items(slices.Values(ids)), func(ctx context.Context, item string) error {
		_, s := tracer.Start(ctx, "item")
		s.End()
		return nil
	}, idem.WithWorkers(2))
	if err != nil || res.Outcome != idem.Ran {
		t.Fatalf("Each: %+v, %v", res, err)
	}
	each := r.one(t, "idem.Each grant")
	wantAttrs(t, each, idemotel.KeyJob.String("grant"), idemotel.KeyPeriod.String("2026-12-01"), idemotel.KeyWorkers.Int(2),
		idemotel.KeyCall.String("idem.Each"), idemotel.KeyOutcome.String("ran"), idemotel.KeyItems.Int(40))
	chunks := r.spans("chunk grant")
	if len(chunks) < 1 {
		t.Fatalf("no chunk spans: %v", r.names())
	}
	items := 0
	for _, c := range chunks {
		wantParent(t, c, each)
		n, _ := attr(c, idemotel.KeyItems)
		items += int(n.AsInt64())
		if a, _ := attr(c, idemotel.KeyAttempt); a.AsInt64() < 1 {
			t.Fatalf("chunk %v has no attempt", c.Attributes())
		}
	}
	if items != 40 {
		t.Fatalf("the chunks hold %d items, want 40", items)
	}
	for _, it := range r.spans("item") {
		if !slices.ContainsFunc(chunks, func(c sdktrace.ReadOnlySpan) bool { return c.SpanContext().SpanID() == it.Parent().SpanID() }) {
			t.Fatalf("an item's span has parent %s, not a chunk", it.Parent().SpanID())
		}
	}
	mark := r.one(t, "idem.Each.mark grant")
	wantParent(t, mark, each)
}

// TestSchedulerSlotToReceiver: one trace from a Scheduler's slot to the
// webhook receiver: the slot's span, its catch-up, the period's RunTx and
// attempt (where outbox.Put stored the trace context), and the delivery
// by the Scheduler's relay, whose request carries the slot's trace id.
func TestSchedulerSlotToReceiver(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	rc := newReceiver(t, nil)
	// The Scheduler's clock stands still (no second period comes due
	// while the test runs); the relay's is the system's, for its polls.
	s := idem.NewScheduler(l, idem.WithClock(idemtest.NewClock(time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC))))
	err := idem.AddTx(s, "report", idem.Hourly(time.UTC), func(ctx context.Context, tx *sql.Tx, p idem.Period) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "reports", Payload: []byte(p.Name)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(l, outbox.Webhook(rc.URL, nil), outbox.WithPoll(5*time.Millisecond), outbox.WithClock(systemClock{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddRelay("webhook", relay); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.tel.Context(context.Background()))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testwait.Until(t, func() bool {
		return len(rc.headers()) > 0 && len(r.spans("scheduler report")) > 0 && len(r.spans("outbox.deliver reports")) > 0
	},
		"the receiver to get the report's message, and the slot's and the delivery's spans to end")
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	testwait.Recv(t, done, "Scheduler.Run to return")

	slot := r.one(t, "scheduler report")
	pass := r.one(t, "catchup report")
	run := r.one(t, "idem.RunTx report")
	att := r.one(t, "attempt report")
	del := r.one(t, "outbox.deliver reports")
	wantParent(t, pass, slot)
	wantParent(t, run, pass)
	wantParent(t, att, run)
	wantParent(t, del, att)
	trace := slot.SpanContext().TraceID()
	if got := traceOf(rc.headers()[0]); got.TraceID() != trace || got.SpanID() != del.SpanContext().SpanID() {
		t.Fatalf("the receiver got trace %s span %s, want the slot's trace %s and the delivery's span %s",
			got.TraceID(), got.SpanID(), trace, del.SpanContext().SpanID())
	}
}

// systemClock is an idem.Clock on the system's time.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestSchedulerOverlappingSlot: a period of an overlapping job that comes
// due while the job's catch-up runs is a slot of its own, named by its
// period, with the period's Run inside it.
func TestSchedulerOverlappingSlot(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	clk := schedtest.NewClock(time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC))
	s := idem.NewScheduler(l, idem.WithClock(clk))
	first, release := make(chan string, 1), make(chan struct{})
	second := make(chan string, 1)
	var calls atomic.Int32
	err := s.Add("hourly", idem.Hourly(time.UTC), func(ctx context.Context, p idem.Period) error {
		if calls.Add(1) == 1 {
			first <- p.Name
			<-release // the first period runs until the second has run
			return nil
		}
		second <- p.Name
		return nil
	}, idem.RunOverlapping())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.tel.Context(context.Background()))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	p1 := testwait.Recv(t, first, "the first period to start")
	clk.Advance(30 * time.Minute) // the next period is due
	p2 := testwait.Recv(t, second, "the second period to start alongside the first")
	close(release)
	// Both slots end; the catch-up that follows them may add one more.
	testwait.Until(t, func() bool { return len(r.spans("scheduler hourly")) >= 2 }, "both slots to end")
	cancel()
	testwait.Recv(t, done, "Scheduler.Run to return")

	var overlapping sdktrace.ReadOnlySpan
	for _, sp := range r.spans("scheduler hourly") {
		if v, ok := attr(sp, idemotel.KeyPeriod); ok && v.AsString() == p2 {
			overlapping = sp
		}
	}
	if overlapping == nil {
		t.Fatalf("no slot names a period (the first ran %s, the second %s)", p1, p2)
	}
	var run sdktrace.ReadOnlySpan
	for _, sp := range r.spans("idem.Run hourly") {
		// The one that ran it (the catch-up that follows may find it done).
		if v, _ := attr(sp, idemotel.KeyPeriod); v.AsString() == p2 && sp.Parent().SpanID() == overlapping.SpanContext().SpanID() {
			run = sp
		}
	}
	if run == nil {
		t.Fatalf("no Run of %s in its slot: %v", p2, r.names())
	}
	wantAttrs(t, run, idemotel.KeyOutcome.String("ran"))
}
