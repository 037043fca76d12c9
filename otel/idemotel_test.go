package idemotel_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/guard"
	"github.com/idemgo/idem/idemstore"
	idemotel "github.com/idemgo/idem/otel"
	"github.com/idemgo/idem/outbox"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// rig is a Telemetry over an SDK tracer provider whose ended spans a
// SpanRecorder keeps.
type rig struct {
	tel *idemotel.Telemetry
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newRig(t testing.TB, opts ...idemotel.Option) *rig {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := idemotel.New(tp, noopMeter(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{tel: tel, rec: rec, tp: tp}
}

// spans returns the ended spans named name.
func (r *rig) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the single ended span named name.
func (r *rig) one(t testing.TB, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	s := r.spans(name)
	if len(s) != 1 {
		t.Fatalf("%d spans named %q, want 1; spans: %v", len(s), name, r.names())
	}
	return s[0]
}

func (r *rig) names() []string {
	var n []string
	for _, s := range r.rec.Ended() {
		n = append(n, s.Name())
	}
	return n
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs fails t unless span s has every attribute of want.
func wantAttrs(t testing.TB, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	for _, w := range want {
		v, ok := attr(s, w.Key)
		if !ok {
			t.Errorf("span %q has no attribute %s; has %v", s.Name(), w.Key, s.Attributes())
			continue
		}
		if v != w.Value {
			t.Errorf("span %q: %s = %v, want %v", s.Name(), w.Key, v.String(), w.Value.String())
		}
	}
}

func wantParent(t testing.TB, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() || child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("span %q's parent is %s, want %q (%s)", child.Name(), child.Parent().SpanID(), parent.Name(), parent.SpanContext().SpanID())
	}
}

func openLedger(t testing.TB) *idem.Ledger {
	t.Helper()
	l, err := idem.OpenLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestRunSpans: a Run is a span named by its call and job with the key's
// attributes, its attempt a child span, and fn's context the attempt's
// (a span fn starts is the attempt's child). A second Run of the key is a
// duplicate: no span of its own (TestDuplicateEvent).
func TestRunSpans(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(context.Background())
	key := idem.Key{Job: "settle", Period: "2026-12-01"}
	tracer := r.tp.Tracer("app")
	for range 2 {
		err := l.Run(ctx, key, func(ctx context.Context) error {
			_, s := tracer.Start(ctx, "work")
			s.End()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	run := r.one(t, "idem.Run settle")
	attempt := r.one(t, "attempt settle")
	work := r.one(t, "work")
	wantParent(t, attempt, run)
	wantParent(t, work, attempt)
	wantAttrs(t, run, idemotel.KeyJob.String("settle"), idemotel.KeyPeriod.String("2026-12-01"),
		idemotel.KeyCall.String("idem.Run"), idemotel.KeyMode.String("at-least-once"), idemotel.KeyStore.String("*idem.Ledger"),
		idemotel.KeyOutcome.String("ran"), idemotel.KeyAttempt.Int64(1), idemotel.KeyAttempts.Int(1))
	wantAttrs(t, attempt, idemotel.KeyAttempt.Int64(1), idemotel.KeyJob.String("settle"))
	if run.Status().Code == codes.Error {
		t.Fatalf("status %v", run.Status())
	}
	if !run.StartTime().Before(attempt.StartTime()) && !run.StartTime().Equal(attempt.StartTime()) {
		t.Fatalf("the call's span starts at %v, after its attempt's %v", run.StartTime(), attempt.StartTime())
	}
}

// TestDuplicateEvent: a duplicate Run (its key is done) has no span of
// its own: an idem.duplicate event (job, period, call) on the span of its
// context, nothing without one. With WithDuplicateSpans it is a span with
// idem.outcome already_done and idem.duplicate true, as every other call.
func TestDuplicateEvent(t *testing.T) {
	for _, dupSpans := range []bool{false, true} {
		var opts []idemotel.Option
		if dupSpans {
			opts = append(opts, idemotel.WithDuplicateSpans())
		}
		r := newRig(t, opts...)
		l := openLedger(t)
		key := idem.Key{Job: "settle", Period: "2026-12-01"}
		fn := func(context.Context) error { return nil }
		ctx := r.tel.Context(context.Background())
		if err := l.Run(ctx, key, fn); err != nil {
			t.Fatal(err)
		}
		if err := l.Run(ctx, key, fn); err != nil { // no parent span
			t.Fatal(err)
		}
		pctx, parent := r.tp.Tracer("app").Start(ctx, "request")
		if err := l.RunTx(pctx, key, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		parent.End()
		req := r.one(t, "request")
		if dupSpans {
			runs := append(r.spans("idem.Run settle"), r.spans("idem.RunTx settle")...)
			if len(runs) != 3 || len(r.spans("attempt settle")) != 1 {
				t.Fatalf("WithDuplicateSpans: spans %v, want 3 calls, 1 attempt", r.names())
			}
			for _, dup := range runs[1:] {
				wantAttrs(t, dup, idemotel.KeyOutcome.String("already_done"), idemotel.KeyDuplicate.Bool(true), idemotel.KeyAttempts.Int(0))
			}
			wantParent(t, runs[2], req)
			if len(req.Events()) != 0 {
				t.Fatalf("WithDuplicateSpans: events %v on the parent", req.Events())
			}
			continue
		}
		if len(r.spans("idem.Run settle")) != 1 || len(r.spans("idem.RunTx settle")) != 0 {
			t.Fatalf("spans %v, want the first call's only", r.names())
		}
		ev := req.Events()
		if len(ev) != 1 || ev[0].Name != "idem.duplicate" {
			t.Fatalf("the parent's events %v, want one idem.duplicate", ev)
		}
		want := map[attribute.Key]attribute.Value{idemotel.KeyJob: attribute.StringValue("settle"),
			idemotel.KeyPeriod: attribute.StringValue("2026-12-01"), idemotel.KeyCall: attribute.StringValue("idem.RunTx")}
		for _, a := range ev[0].Attributes {
			if w, ok := want[a.Key]; ok && w == a.Value {
				delete(want, a.Key)
			}
		}
		if len(want) != 0 {
			t.Fatalf("the event's attributes %v lack %v", ev[0].Attributes, want)
		}
	}
}

// TestRunRetrySpansLinked: an fn that fails is retried in the call; each
// attempt is a span of its own, the failure recorded on the first, and the
// second links to the first.
func TestRunRetrySpansLinked(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(context.Background())
	key := idem.Key{Job: "flaky", Period: "p1"}
	calls := 0
	err := l.Run(ctx, key, func(ctx context.Context) error {
		calls++
		if calls == 1 {
			return errors.New("boom")
		}
		return nil
	}, idem.WithBackoff(idem.Constant(idem.MinLease)))
	if err != nil {
		t.Fatal(err)
	}
	atts := r.spans("attempt flaky")
	if len(atts) != 2 {
		t.Fatalf("attempt spans: %v", r.names())
	}
	first, second := atts[0], atts[1]
	if first.Status().Code != codes.Error || !strings.Contains(first.Status().Description, "boom") || len(first.Events()) == 0 {
		t.Fatalf("first attempt: status %v, events %v", first.Status(), first.Events())
	}
	wantAttrs(t, second, idemotel.KeyAttempt.Int64(2), idemotel.KeyPreviousAttempt.Int64(1))
	if len(second.Links()) != 1 || second.Links()[0].SpanContext.SpanID() != first.SpanContext().SpanID() {
		t.Fatalf("second attempt's links %v, want the first attempt %s", second.Links(), first.SpanContext().SpanID())
	}
	run := r.one(t, "idem.Run flaky")
	wantParent(t, first, run)
	wantParent(t, second, run)
	wantAttrs(t, run, idemotel.KeyAttempts.Int(2), idemotel.KeyOutcome.String("ran"))
}

// TestRunTxSpans: RunTx's body runs in its attempt's span, a child of
// the call's.
func TestRunTxSpans(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(context.Background())
	key := idem.Key{Job: "book", Period: "p1"}
	var inBody trace.SpanContext
	if err := l.RunTx(ctx, key, func(ctx context.Context, tx *sql.Tx) error {
		inBody = trace.SpanContextFromContext(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	run := r.one(t, "idem.RunTx book")
	att := r.one(t, "attempt book")
	wantParent(t, att, run)
	if inBody.SpanID() != att.SpanContext().SpanID() {
		t.Fatalf("the body's span %s, want the attempt's %s", inBody.SpanID(), att.SpanContext().SpanID())
	}
	wantAttrs(t, run, idemotel.KeyCall.String("idem.RunTx"), idemotel.KeyOutcome.String("ran"), idemotel.KeyStore.String("*idem.Ledger"))
}

// TestRunDeferredSpan: a call a guard defers is outcome deferred, with the
// guard's name as reason and an idem.deferred event, not an error status.
func TestRunDeferredSpan(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(context.Background())
	err := l.Run(ctx, idem.Key{Job: "guarded", Period: "p1"}, func(context.Context) error { return nil },
		idem.WithGuard(guard.Func("memory", func(context.Context) error { return errors.New("too little memory") })))
	if !errors.Is(err, idem.ErrDeferred) {
		t.Fatalf("Run: %v, want ErrDeferred", err)
	}
	run := r.one(t, "idem.Run guarded")
	wantAttrs(t, run, idemotel.KeyOutcome.String("deferred"), idemotel.KeyReason.String("memory"))
	if run.Status().Code == codes.Error {
		t.Fatalf("status %v: a deferral is no failure", run.Status())
	}
	if len(r.spans("attempt guarded")) != 0 {
		t.Fatalf("a deferred call has an attempt: %v", r.names())
	}
	if !slices.ContainsFunc(run.Events(), func(e sdktrace.Event) bool { return e.Name == "idem.deferred" }) {
		t.Fatalf("events %v, want idem.deferred", run.Events())
	}
}

// receiver is an httptest server that records each request's headers.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []http.Header
}

func newReceiver(t testing.TB, h func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, r.Header.Clone())
		n := len(rc.got)
		rc.mu.Unlock()
		if h != nil {
			h(w, r, n)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) headers() []http.Header {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// traceOf is the trace context a request carries (W3C traceparent).
func traceOf(h http.Header) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h))
	return trace.SpanContextFromContext(ctx)
}

// TestOutboxTraceReachesReceiver: a message Put inside a traced RunTx
// stores the attempt's trace context; the relay (in another context, with
// no trace of its own) starts the delivery span as its child, and the
// Webhook's request carries the delivery span's traceparent: the receiver
// sees the RunTx's trace id.
func TestOutboxTraceReachesReceiver(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	key := idem.Key{Job: "notify", Period: "p1"}
	var id string
	err := l.RunTx(r.tel.Context(context.Background()), key, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		id, err = outbox.Put(ctx, tx, outbox.Message{Topic: "orders", Payload: []byte("hello"),
			Headers: map[string]string{"X-Tenant": "a"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	att := r.one(t, "attempt notify")
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("outbox: %v, %v", recs, err)
	}
	if tp := recs[0].Headers["traceparent"]; !strings.Contains(tp, att.SpanContext().SpanID().String()) {
		t.Fatalf("stored traceparent %q, want the attempt's span %s", tp, att.SpanContext().SpanID())
	}

	rc := newReceiver(t, nil)
	res, err := outbox.RelayOnce(r.tel.Context(context.Background()), l, outbox.Webhook(rc.URL, nil))
	if err != nil || res.Delivered != 1 {
		t.Fatalf("relay: %+v, %v", res, err)
	}
	del := r.one(t, "outbox.deliver orders")
	wantParent(t, del, att)
	wantAttrs(t, del, idemotel.KeyMessageID.String(id), idemotel.KeyTopic.String("orders"), idemotel.KeyOutcome.String("delivered"),
		idemotel.KeyAttempt.Int(1), idemotel.KeyJob.String("notify"))
	if del.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("delivery span kind %v", del.SpanKind())
	}
	h := rc.headers()
	if len(h) != 1 {
		t.Fatalf("%d requests", len(h))
	}
	got := traceOf(h[0])
	if got.TraceID() != att.SpanContext().TraceID() || got.SpanID() != del.SpanContext().SpanID() {
		t.Fatalf("the receiver got trace %s span %s, want the RunTx's trace %s, the delivery's span %s",
			got.TraceID(), got.SpanID(), att.SpanContext().TraceID(), del.SpanContext().SpanID())
	}
	if h[0].Get("X-Tenant") != "a" {
		t.Fatalf("the message's own header was lost: %v", h[0])
	}
}

// TestPutKeepsCallersTraceparent: a traceparent the caller set on the
// message is stored as it is.
func TestPutKeepsCallersTraceparent(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	err := l.RunTx(r.tel.Context(context.Background()), idem.Key{Job: "notify", Period: "p1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t", Headers: map[string]string{"traceparent": own}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{})
	if err != nil || len(recs) != 1 || recs[0].Headers["traceparent"] != own {
		t.Fatalf("outbox: %+v, %v", recs, err)
	}
}

// TestUntracedPutStoresNoTraceContext: without Telemetry in the context,
// Put stores the headers given, nothing more.
func TestUntracedPutStoresNoTraceContext(t *testing.T) {
	l := openLedger(t)
	err := l.RunTx(context.Background(), idem.Key{Job: "notify", Period: "p1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{})
	if err != nil || len(recs) != 1 || len(recs[0].Headers) != 0 {
		t.Fatalf("outbox: %+v, %v", recs, err)
	}
}

// TestDeliveryLinksRelaySpan: a relay whose context has a span of its own
// starts the delivery span as a child of the message's stored trace
// context, linked to the relay's span; a message stored without a trace
// context is delivered in the relay's span.
func TestDeliveryLinksRelaySpan(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	put := func(ctx context.Context, period string) {
		t.Helper()
		if err := l.RunTx(ctx, idem.Key{Job: "notify", Period: period}, func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t-" + period})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	put(r.tel.Context(context.Background()), "traced")
	put(context.Background(), "untraced")
	rc := newReceiver(t, nil)
	ctx, relaySpan := r.tp.Tracer("app").Start(r.tel.Context(context.Background()), "relay pass")
	if _, err := outbox.RelayOnce(ctx, l, outbox.Webhook(rc.URL, nil)); err != nil {
		t.Fatal(err)
	}
	relaySpan.End()
	pass := r.one(t, "relay pass")
	traced := r.one(t, "outbox.deliver t-traced")
	wantParent(t, traced, r.one(t, "attempt notify"))
	if len(traced.Links()) != 1 || traced.Links()[0].SpanContext.SpanID() != pass.SpanContext().SpanID() {
		t.Fatalf("the delivery's links %v, want the relay's span", traced.Links())
	}
	untraced := r.one(t, "outbox.deliver t-untraced")
	wantParent(t, untraced, pass)
}

// TestOutboxCallersTraceContextAnyCase: a caller's trace context set on
// the message in mixed case (Traceparent, TraceState) wins over the
// RunTx's: it is stored once, as traceparent and tracestate, and the
// delivery's span is its child, so the receiver gets one traceparent, in
// the caller's trace. The caller's 10 KB tracestate is no W3C list: it is
// not forwarded next to the delivery's traceparent. The old Put stored
// Traceparent beside the RunTx's traceparent (the delivery became a child
// of the RunTx's, by map order the receiver got either), and the relay
// forwarded the 10 KB tracestate as it was.
func TestOutboxCallersTraceContextAnyCase(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	big := strings.Repeat("x", 10<<10)
	err := l.RunTx(r.tel.Context(context.Background()), idem.Key{Job: "notify", Period: "p1"}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := outbox.Put(ctx, tx, outbox.Message{Topic: "t", Headers: map[string]string{"Traceparent": own, "TraceState": big}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.ListOutbox(context.Background(), idemstore.OutboxFilter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("outbox: %+v, %v", recs, err)
	}
	if h := recs[0].Headers; len(h) != 2 || h["traceparent"] != own || h["tracestate"] != big {
		t.Fatalf("stored headers %.300v: want the caller's traceparent and tracestate, once each, under their W3C names", h)
	}
	rc := newReceiver(t, nil)
	if res, err := outbox.RelayOnce(r.tel.Context(context.Background()), l, outbox.Webhook(rc.URL, nil)); err != nil || res.Delivered != 1 {
		t.Fatalf("relay: %+v, %v", res, err)
	}
	h := rc.headers()
	if len(h) != 1 {
		t.Fatalf("%d requests", len(h))
	}
	if tps := h[0].Values("Traceparent"); len(tps) != 1 || !strings.Contains(tps[0], "0af7651916cd43dd8448eb211c80319c") {
		t.Fatalf("the receiver got traceparent %q: want one, in the caller's trace 0af7651916cd43dd8448eb211c80319c", tps)
	}
	if ts := h[0].Values("Tracestate"); len(ts) != 0 {
		t.Fatalf("the receiver got a tracestate of %d characters next to the delivery's traceparent: want none (the caller's is no W3C list)", len(ts[0]))
	}
}

// TestRerunSpan: the attempt of a re-run (idem.Rerun) carries the
// period's revision; the first run's does not.
func TestRerunSpan(t *testing.T) {
	r := newRig(t)
	l := openLedger(t)
	ctx := r.tel.Context(context.Background())
	key := idem.Key{Job: "settle", Period: "2026-12-02"}
	noop := func(context.Context) error { return nil }
	if err := l.Run(ctx, key, noop); err != nil {
		t.Fatal(err)
	}
	if _, err := idem.Rerun(ctx, l, idem.RerunRequest{Keys: []idem.Key{key}, RequestID: "r1", Reason: "repair"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, key, noop); err != nil {
		t.Fatal(err)
	}
	attempts := r.spans("attempt settle")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2 (the run and the re-run); spans: %v", len(attempts), r.names())
	}
	for _, kv := range attempts[0].Attributes() {
		if kv.Key == idemotel.KeyRevision {
			t.Errorf("the first run's attempt has %v, want no revision", kv)
		}
	}
	wantAttrs(t, attempts[1], idemotel.KeyRevision.Int64(1))
}
