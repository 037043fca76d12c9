package idemotel_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	idemotel "github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/outbox"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestInProgressIsNoError: a call that finds its key held by a live
// attempt is outcome in_progress, its error recorded but its status not
// Error: it says "not now".
func TestInProgressIsNoError(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	key := idem.Key{Job: "held", Period: "p1"}
	var inner error
	err := l.Run(r.tel.Context(context.Background()), key, func(context.Context) error {
		// Another call, not inside this one's fn (a context of its own).
		inner = l.Run(r.tel.Context(context.Background()), key, func(context.Context) error { return nil })
		return nil
	})
	if err != nil || !errors.Is(inner, idem.ErrInProgress) {
		t.Fatalf("outer %v, inner %v (want ErrInProgress)", err, inner)
	}
	runs := r.spans("idem.Run held")
	if len(runs) != 2 {
		t.Fatalf("spans %v", r.names())
	}
	held := runs[0] // the inner call ended first
	wantAttrs(t, held, idemotel.KeyOutcome.String("in_progress"))
	if held.Status().Code == codes.Error || len(held.Events()) == 0 {
		t.Fatalf("in_progress: status %v, events %v", held.Status(), held.Events())
	}
}

// TestWithLinksZero: WithLinks(0) keeps no span contexts: a retry has
// idem.previous_attempt and no link.
func TestWithLinksZero(t *testing.T) {
	r := newRig(t, idemotel.WithLinks(0))
	l := openLedger(t)
	calls := 0
	err := l.Run(r.tel.Context(context.Background()), idem.Key{Job: "flaky", Period: "p1"}, func(context.Context) error {
		if calls++; calls == 1 {
			return errors.New("boom")
		}
		return nil
	}, idem.WithBackoff(idem.Constant(idem.MinLease)))
	if err != nil {
		t.Fatal(err)
	}
	atts := r.spans("attempt flaky")
	if len(atts) != 2 || len(atts[1].Links()) != 0 {
		t.Fatalf("attempts %d, the retry's links %v", len(atts), atts[len(atts)-1].Links())
	}
	wantAttrs(t, atts[1], idemotel.KeyPreviousAttempt.Int64(1))
}

// headerPropagator is a propagator of its own: the trace and span ids in
// X-Trace and X-Span.
type headerPropagator struct{}

func (headerPropagator) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsValid() {
		c.Set("x-trace", sc.TraceID().String())
		c.Set("x-span", sc.SpanID().String())
	}
}

func (headerPropagator) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	tid, err1 := trace.TraceIDFromHex(c.Get("x-trace"))
	sid, err2 := trace.SpanIDFromHex(c.Get("x-span"))
	if err1 != nil || err2 != nil {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
}

func (headerPropagator) Fields() []string { return []string{"x-trace", "x-span"} }

// TestWithPropagator: the propagator given writes the stored trace
// context and reads it back for the delivery's span.
func TestWithPropagator(t *testing.T) {
	r := newRig(t, idemotel.WithPropagator(headerPropagator{}))
	l := openLedger(t)
	err := l.RunTx(r.tel.Context(context.Background()), idem.Key{Job: "notify", Period: "p1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "orders"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	att := r.one(t, "attempt notify")
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{})
	if err != nil || len(recs) != 1 || recs[0].Headers["x-span"] != att.SpanContext().SpanID().String() || recs[0].Headers["traceparent"] != "" {
		t.Fatalf("stored headers %v, %v", recs, err)
	}
	rc := newReceiver(t, nil)
	if _, err := outbox.RelayOnce(r.tel.Context(context.Background()), l, outbox.Webhook(rc.URL, nil)); err != nil {
		t.Fatal(err)
	}
	del := r.one(t, "outbox.deliver orders")
	wantParent(t, del, att)
	if h := rc.headers(); len(h) != 1 || h[0].Get("X-Span") != del.SpanContext().SpanID().String() {
		t.Fatalf("the receiver's headers %v", h)
	}
}

// TestContextTwiceTracesOnce: Context applied to a context it made
// already traces each call once.
func TestContextTwiceTracesOnce(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(r.tel.Context(context.Background()))
	if err := l.Run(ctx, idem.Key{Job: "once", Period: "p1"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	r.one(t, "idem.Run once")
	r.one(t, "attempt once")
}
