// Package idemotel traces idem's runs with OpenTelemetry and records
// their metrics through an OpenTelemetry meter.
//
// It is a separate module, github.com/idemgo/idem/otel, so that the core
// module does not depend on OpenTelemetry. The engine reports its work to
// hooks carried by the context ([idemstore.Spans]); [Telemetry.Context]
// puts this package's in a context, and every Run, RunTx, fan-out,
// catch-up, Scheduler and outbox relay given that context (or one derived
// from it) is traced:
//
//	t, err := idemotel.New(tp, mp) // nil: the global providers
//	if err != nil { ... }
//	ctx = t.Context(ctx)
//	err = idem.RunTx(ctx, ledger, key, fn, t.Option()) // t.Option(): the metrics
//	go outbox.Relay(ctx, ledger, outbox.Webhook(url, nil))
//
// # Spans
//
//	name                      kind      what
//	<call> <job>              internal  one call of Run, RunTx, RunValue (call: idem.Run, idem.RunTx, ...); a catch-up's period's too; a duplicate's: none (see Duplicates)
//	attempt <job>             internal  one attempt of fn, inside the call's span: fn's context is the attempt's
//	idem.Each <job>         internal  one call of idem.Each or EachTx
//	idem.Each.mark <job>    internal  the Run of the period's done mark, inside a fan-out's span
//	chunk <job>               internal  one chunk of a fan-out's items, worked by one worker
//	catchup <job>             internal  one pass of idem.CatchUp or RunTx: its periods' calls are inside it
//	scheduler <job>           internal  one look of a Scheduler at a due job (its catch-up, or one period of an overlapping job)
//	outbox.deliver <topic>    producer  one delivery attempt of an outbox message by a relay
//
// Attributes: idem.job, idem.period, idem.call, idem.mode, idem.store on a
// call's span, and at its end idem.outcome (Outcome.String(): ran,
// already_done, deferred, ...), idem.attempts and idem.attempt; on an
// attempt's, idem.attempt, idem.previous_attempt (a retry) and
// idem.takeover (the attempt before may have had its effect); on a chunk's,
// idem.chunk, idem.items and idem.workers; on a delivery's,
// messaging.message.id, messaging.destination.name (the topic),
// idem.attempt (the delivery's) and idem.outcome (delivered, retrying,
// parked, superseded). An error is recorded on the span (RecordError) and
// sets its status to Error, except the answers that say "not now" rather
// than "failed": a deferral (idem.outcome deferred, with idem.reason, the
// guard's name or breaker, and an event "idem.deferred") and a key that
// another holder runs (in_progress).
//
// # Duplicates
//
// A duplicate, a call that finds its key done, has no span of its own: it
// adds an event idem.duplicate (idem.job, idem.period, idem.call) to the
// span of its context, if that span is recording, and records nothing
// when there is none. A duplicate is the cheapest call, and a span of its
// own would double its cost with the SDK's batching processor; the
// metrics count it (idem.runs, idem.outcome already_done) all the same.
// [WithDuplicateSpans] gives it a span, idem.outcome already_done with
// idem.duplicate true, like every other call. For that, a call's span
// starts when the call turns out to be more than a duplicate: when its
// first attempt starts, or at its end with another outcome; its start
// time is the call's all the same. NOT promised, without
// WithDuplicateSpans: that what the store does before the attempt (the
// claim) is inside the call's span. A span started from the context the
// store is given there, such as an instrumented database driver's, is a
// child of the caller's span.
//
// # Links between attempts
//
// An attempt that follows another of the same key (a retry after a
// failure, in this call or a later one, or the take-over of an attempt
// that died) has a span link to that attempt's span, when that attempt ran
// in this process under the same [Telemetry] (it keeps the span contexts
// of the last [DefaultLinks] attempts in memory). NOT linked: an attempt
// that ran in another process, or in this one before it restarted, such
// as the one a SIGKILL interrupted. No store keeps span contexts, so
// nothing tells the new attempt where that span is: its span carries
// idem.previous_attempt (and idem.takeover) instead, and the attempt
// before has idem.job, idem.period and idem.attempt set to those values,
// which finds it in a trace backend.
//
// # Context that travels
//
// outbox.Put, in a traced body, stores the attempt's trace context
// (traceparent, tracestate) in the message's headers, unless the caller
// set a traceparent there (in any case: its context wins whole). The
// tracestate sent next to a new traceparent is a valid W3C one, cut to
// 512 characters, or none (see idemstore.InjectSpan). The relay starts the
// delivery's span as a child of it (linked to the relay's own span, if its
// context has one), hours later and in another process if so, and hands
// the deliverer the delivery span's trace context in the headers: the
// Webhook sends them, so the receiver's span joins the trace of the
// transaction that queued the message. The propagator is W3C Trace
// Context unless [WithPropagator] says otherwise.
//
// # Metrics
//
// [Telemetry.Option] (or [Telemetry.Observe]) records each call's result
// through the meter, and [Telemetry.RelayOption] each delivery of a relay,
// with the meaning of package prom's metrics (github.com/idemgo/idem/prom)
// and names that translate to theirs (see [Instruments]); the gauges that
// prom reads at scrape time are read at collection time from what
// [Metrics.Watch], [Metrics.WatchScheduler] and [Metrics.WatchOutbox] are
// given:
//
//	m := t.Metrics()
//	m.Watch(ledger)       // idem.keys, idem.ledger.up
//	m.WatchOutbox(ledger) // idem.outbox.messages, idem.outbox.oldest_pending_age, idem.outbox.up
//	m.WatchScheduler(s)   // idem.last_success.timestamp, idem.next_due.timestamp
package idemotel

import (
	"context"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/idemgo/idem/otel"

// DefaultLinks is how many attempts' span contexts a [Telemetry] keeps
// for the links of the attempts that follow them.
const DefaultLinks = 4096

// An Option configures [New].
type Option func(*config)

type config struct {
	prop     propagation.TextMapPropagator
	links    int
	dupSpans bool
}

// WithPropagator sets the propagator that writes the trace context into a
// message's headers and reads it back (default propagation.TraceContext:
// traceparent and tracestate).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// WithDuplicateSpans gives every call a span from its start, a duplicate's
// too: a span with idem.outcome already_done and idem.duplicate true,
// instead of an idem.duplicate event on the span of its context. It costs
// a duplicate call a span (see the bench's otel_sdk_duplicate_vs_plain
// line); what the store does during the claim (the spans of an
// instrumented database driver) is then inside the call's span.
func WithDuplicateSpans() Option { return func(c *config) { c.dupSpans = true } }

// WithLinks sets how many attempts' span contexts are kept for links
// (default [DefaultLinks]); 0 keeps none: no links between attempts.
func WithLinks(n int) Option { return func(c *config) { c.links = max(n, 0) } }

// Telemetry traces idem's work (through the context: [Telemetry.Context])
// and records its metrics ([Telemetry.Option]). It is safe for concurrent
// use.
type Telemetry struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	spans    *idemstore.Spans
	links    *linkCache
	metrics  *Metrics
	dupSpans bool
}

// New returns the Telemetry that traces through tp and records metrics
// through mp (the global providers, otel.GetTracerProvider and
// otel.GetMeterProvider, when nil). Its error is the meter's, creating an
// instrument.
func New(tp trace.TracerProvider, mp metric.MeterProvider, opts ...Option) (*Telemetry, error) {
	c := config{prop: propagation.TraceContext{}, links: DefaultLinks}
	for _, o := range opts {
		o(&c)
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m, err := NewMetrics(mp)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{tracer: tp.Tracer(ScopeName), prop: c.prop, links: newLinkCache(c.links), metrics: m, dupSpans: c.dupSpans}
	t.spans = &idemstore.Spans{Start: t.start, Inject: t.inject}
	return t, nil
}

// Context returns ctx carrying t: every Run, RunTx, idem.Each, catch-up,
// Scheduler (its Run's context) and outbox relay given it is traced. A
// crash kit's hooks in ctx (idemstore.WithTrace, idemtest) keep working,
// and so does another tracer's idemstore.Spans: both are called.
func (t *Telemetry) Context(ctx context.Context) context.Context {
	return idemstore.WithSpans(ctx, t.spans)
}

// Option returns an idem option that records the metrics of every call it
// is passed to: idem.OnResult(t.Observe). Pass it to a Run, to a catch-up,
// to Each, to a Scheduler's job, or to idem.OpenLedger for every call on
// that ledger.
func (t *Telemetry) Option() idem.Option { return t.metrics.Option() }

// Observe records one call's result (see [Metrics.Observe]).
func (t *Telemetry) Observe(r idem.Result) { t.metrics.Observe(r) }

// Metrics returns t's instruments.
func (t *Telemetry) Metrics() *Metrics { return t.metrics }

func (t *Telemetry) inject(ctx context.Context, h map[string]string) {
	if p := pendingOf(ctx); p != nil {
		ctx = p.begin(ctx) // the call's span is the context that travels
	}
	t.prop.Inject(ctx, propagation.MapCarrier(h))
}

// Attribute keys.
const (
	KeyJob             = attribute.Key("idem.job")
	KeyPeriod          = attribute.Key("idem.period")
	KeyCall            = attribute.Key("idem.call")
	KeyMode            = attribute.Key("idem.mode")
	KeyStore           = attribute.Key("idem.store")
	KeyOutcome         = attribute.Key("idem.outcome")
	KeyAttempt         = attribute.Key("idem.attempt")
	KeyAttempts        = attribute.Key("idem.attempts")
	KeyPreviousAttempt = attribute.Key("idem.previous_attempt")
	KeyTakeover        = attribute.Key("idem.takeover")
	KeyRevision        = attribute.Key("idem.revision")
	KeyDuplicate       = attribute.Key("idem.duplicate")
	KeyReason          = attribute.Key("idem.reason")
	KeyWorkers         = attribute.Key("idem.workers")
	KeyChunk           = attribute.Key("idem.chunk")
	KeyItems           = attribute.Key("idem.items")
	KeyPeriods         = attribute.Key("idem.periods")
	KeyMessageID       = attribute.Key("messaging.message.id")
	KeyTopic           = attribute.Key("messaging.destination.name")
	KeyMessagingSystem = attribute.Key("messaging.system")
)

// attrKeys maps the engine's attribute names to this package's keys.
var attrKeys = map[string]attribute.Key{
	idemstore.AttrCall:     KeyCall,
	idemstore.AttrMode:     KeyMode,
	idemstore.AttrStore:    KeyStore,
	idemstore.AttrAttempt:  KeyAttempt,
	idemstore.AttrPrevious: KeyPreviousAttempt,
	idemstore.AttrTakeover: KeyTakeover,
	idemstore.AttrRevision: KeyRevision,
	idemstore.AttrAttempts: KeyAttempts,
	idemstore.AttrReason:   KeyReason,
	idemstore.AttrWorkers:  KeyWorkers,
	idemstore.AttrChunk:    KeyChunk,
	idemstore.AttrItems:    KeyItems,
	idemstore.AttrPeriods:  KeyPeriods,
	idemstore.AttrMessage:  KeyMessageID,
	idemstore.AttrTopic:    KeyTopic,
}

func convert(attrs []idemstore.Attr, out []attribute.KeyValue) []attribute.KeyValue {
	for _, a := range attrs {
		k, ok := attrKeys[a.Key]
		if !ok {
			k = attribute.Key("idem." + a.Key)
		}
		switch v := a.Value.(type) {
		case string:
			out = append(out, k.String(v))
		case bool:
			out = append(out, k.Bool(v))
		case int:
			out = append(out, k.Int(v))
		case int64:
			out = append(out, k.Int64(v))
		}
	}
	return out
}

func lookup(attrs []idemstore.Attr, key string) any {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

// SpanName is the name of the span of the engine's work s.
func SpanName(s idemstore.SpanStart) string {
	switch s.Kind {
	case idemstore.SpanRun:
		call, _ := lookup(s.Attrs, idemstore.AttrCall).(string)
		if call == "" {
			call = "idem.Run"
		}
		return call + " " + s.Key.Job
	case idemstore.SpanAttempt:
		return "attempt " + s.Key.Job
	case idemstore.SpanEach:
		return "idem.Each " + s.Key.Job
	case idemstore.SpanChunk:
		return "chunk " + s.Key.Job
	case idemstore.SpanCatchUp:
		return "catchup " + s.Key.Job
	case idemstore.SpanSlot:
		return "scheduler " + s.Key.Job
	case idemstore.SpanDelivery:
		topic, _ := lookup(s.Attrs, idemstore.AttrTopic).(string)
		return "outbox.deliver " + topic
	}
	return "idem." + string(s.Kind) + " " + s.Key.Job
}

// start is the engine's Spans.Start.
func (t *Telemetry) start(ctx context.Context, s idemstore.SpanStart) (context.Context, func(idemstore.SpanEnd)) {
	inCall := false
	if p := pendingOf(ctx); p != nil {
		ctx, inCall = p.begin(ctx), true // work inside a call: the call's span starts now, its parent
	}
	if s.Kind == idemstore.SpanRun && !t.dupSpans {
		p := &pendingCall{Context: ctx, t: t, s: s, at: time.Now()}
		return p, p.end
	}
	ctx, span, linked := t.startSpan(ctx, s, time.Time{}, nil)
	if inCall {
		// What starts inside this span is its child, not the call's.
		ctx = context.WithValue(ctx, pendingKey{}, (*pendingCall)(nil))
	}
	if linked.attempt > 0 {
		return ctx, func(e idemstore.SpanEnd) {
			if e.Err == nil {
				// The key is done: no attempt of it follows this one.
				t.links.forget(linked, span.SpanContext())
			}
			end(span, e, true)
		}
	}
	return ctx, func(e idemstore.SpanEnd) { end(span, e, true) }
}

// Span start options that every span of a kind shares.
var (
	internalKind = trace.WithSpanKind(trace.SpanKindInternal)
	producerKind = trace.WithSpanKind(trace.SpanKindProducer)
)

// startSpan starts the span of s (at, if not zero: the work started
// then), with s's attributes and more. An attempt's span context is kept
// for the links of the attempts after it, under linked.
func (t *Telemetry) startSpan(ctx context.Context, s idemstore.SpanStart, at time.Time, more []attribute.KeyValue) (_ context.Context, _ trace.Span, linked attemptKey) {
	buf := getAttrs()
	defer putAttrs(buf)
	attrs := (*buf)[:0]
	if s.Key.Job != "" {
		attrs = append(attrs, KeyJob.String(s.Key.Job))
	}
	if s.Key.Period != "" {
		attrs = append(attrs, KeyPeriod.String(s.Key.Period))
	}
	attrs = convert(s.Attrs, attrs)
	attrs = append(attrs, more...)
	optsBuf := optsPool.Get().(*[]trace.SpanStartOption)
	defer putOpts(optsBuf)
	opts := append((*optsBuf)[:0], internalKind)
	var linkKey attemptKey
	switch s.Kind {
	case idemstore.SpanAttempt:
		attempt, _ := lookup(s.Attrs, idemstore.AttrAttempt).(int64)
		linkKey = attemptKey{s.Key, attempt}
		if prev, _ := lookup(s.Attrs, idemstore.AttrPrevious).(int64); prev > 0 {
			if sc, ok := t.links.get(attemptKey{s.Key, prev}); ok {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
					Attributes: []attribute.KeyValue{KeyPreviousAttempt.Int64(prev)}}))
			}
		}
	case idemstore.SpanDelivery:
		attrs = append(attrs, KeyMessagingSystem.String("idem.outbox"))
		opts[0] = producerKind
		// The parent is the trace context stored with the message (the
		// body that Put it); the relay's own span, if any, is a link.
		stored := t.prop.Extract(context.Background(), propagation.MapCarrier(s.Headers))
		if sc := trace.SpanContextFromContext(stored); sc.IsValid() {
			if own := trace.SpanContextFromContext(ctx); own.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: own}))
			}
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	opts = append(opts, trace.WithAttributes(attrs...)) // copied into the span's config
	if !at.IsZero() {
		opts = append(opts, trace.WithTimestamp(at))
	}
	ctx, span := t.tracer.Start(ctx, SpanName(s), opts...) // opts applied, not kept
	*buf, *optsBuf = attrs, opts
	if linkKey.attempt > 0 && t.links.put(linkKey, span.SpanContext()) {
		linked = linkKey
	}
	return ctx, span, linked
}

// attrsPool holds the attribute slices of span starts and events, which
// trace.WithAttributes copies (into the span's config, the event's): a
// span's start allocates what the SDK keeps, not a slice more.
var attrsPool = sync.Pool{New: func() any {
	s := make([]attribute.KeyValue, 0, 16)
	return &s
}}

// optsPool holds the option slices of span starts.
var optsPool = sync.Pool{New: func() any {
	s := make([]trace.SpanStartOption, 0, 4)
	return &s
}}

func putOpts(s *[]trace.SpanStartOption) {
	clear((*s)[:cap(*s)])
	*s = (*s)[:0]
	optsPool.Put(s)
}

func getAttrs() *[]attribute.KeyValue { return attrsPool.Get().(*[]attribute.KeyValue) }

func putAttrs(s *[]attribute.KeyValue) {
	if cap(*s) > 64 {
		return // a rare large one: left to the collector
	}
	clear((*s)[:cap(*s)]) // holds no strings for the collector
	*s = (*s)[:0]
	attrsPool.Put(s)
}

// pendingKey is the context key of a call whose span has not started.
type pendingKey struct{}

// pendingOf returns the call of ctx whose span has not started, if any
// (nil inside a span that started in it).
func pendingOf(ctx context.Context) *pendingCall {
	p, _ := ctx.Value(pendingKey{}).(*pendingCall)
	return p
}

// pendingCall is a call of Run whose span starts when the call turns out
// to be more than a duplicate: when work starts inside it (its attempt),
// or at its end with an outcome other than already_done. A duplicate
// gets none: an idem.duplicate event on the span of its context instead.
// The span's start time is the call's.
//
// It is the call's context too: the context it was started with (whose
// span is the parent's), carrying itself under pendingKey.
type pendingCall struct {
	context.Context
	t  *Telemetry
	s  idemstore.SpanStart
	at time.Time

	mu   sync.Mutex
	span trace.Span // nil until started
}

// Value returns p for pendingKey, else the value of the call's context.
func (p *pendingCall) Value(key any) any {
	if _, ok := key.(pendingKey); ok {
		return p
	}
	return p.Context.Value(key)
}

// begin starts the call's span if it has not, and returns ctx with it.
func (p *pendingCall) begin(ctx context.Context) context.Context {
	p.mu.Lock()
	if p.span == nil {
		_, p.span, _ = p.t.startSpan(p.Context, p.s, p.at, nil)
	}
	span := p.span
	p.mu.Unlock()
	return trace.ContextWithSpan(ctx, span)
}

// end is the call's end.
func (p *pendingCall) end(e idemstore.SpanEnd) {
	p.mu.Lock()
	span := p.span
	p.mu.Unlock()
	if span != nil {
		end(span, e, true)
		return
	}
	if e.Outcome == alreadyDone && e.Err == nil {
		if parent := trace.SpanFromContext(p.Context); parent.IsRecording() {
			buf := getAttrs()
			defer putAttrs(buf)
			attrs := append((*buf)[:0], KeyJob.String(p.s.Key.Job))
			if p.s.Key.Period != "" {
				attrs = append(attrs, KeyPeriod.String(p.s.Key.Period))
			}
			if call, ok := lookup(p.s.Attrs, idemstore.AttrCall).(string); ok {
				attrs = append(attrs, KeyCall.String(call))
			}
			parent.AddEvent(duplicateEvent, trace.WithAttributes(attrs...)) // copied into the event
			*buf = attrs
		}
		return
	}
	// Started and ended at once, with every attribute.
	buf := getAttrs()
	defer putAttrs(buf)
	*buf = endAttrs((*buf)[:0], e)
	_, span, _ = p.t.startSpan(p.Context, p.s, p.at, *buf)
	end(span, e, false)
}

// duplicateEvent is the event that a duplicate call adds to the span of
// its context.
const duplicateEvent = "idem.duplicate"

var alreadyDone = idem.AlreadyDone.String()

// notNow reports whether the outcome named says "not now" rather than
// "failed" (idem.Outcome.NotNow, which the metrics' error counters use
// too): its span's status stays unset.
func notNow(outcome string) bool {
	var o idem.Outcome
	return o.UnmarshalText([]byte(outcome)) == nil && o.NotNow()
}

// endAttrs appends the attributes of a span's end to attrs.
func endAttrs(attrs []attribute.KeyValue, e idemstore.SpanEnd) []attribute.KeyValue {
	attrs = convert(e.Attrs, attrs)
	if e.Outcome != "" {
		attrs = append(attrs, KeyOutcome.String(e.Outcome))
	}
	if e.Outcome == alreadyDone {
		attrs = append(attrs, KeyDuplicate.Bool(true))
	}
	return attrs
}

// end ends span as e says (setAttrs: with endAttrs(e), which a span
// started at its end has already).
func end(span trace.Span, e idemstore.SpanEnd, setAttrs bool) {
	if !span.IsRecording() { // not sampled, or a no-op provider's
		span.End()
		return
	}
	if setAttrs && (len(e.Attrs) > 0 || e.Outcome != "") { // an attempt's has none
		buf := getAttrs()
		*buf = endAttrs((*buf)[:0], e)
		span.SetAttributes(*buf...) // copied into the span
		putAttrs(buf)
	}
	if e.Outcome == idem.Deferred.String() {
		reason, _ := lookup(e.Attrs, idemstore.AttrReason).(string)
		span.AddEvent("idem.deferred", trace.WithAttributes(KeyReason.String(reason)))
	}
	if e.Err != nil {
		span.RecordError(e.Err)
		if !notNow(e.Outcome) {
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	span.End()
}

// attemptKey names one attempt of a key.
type attemptKey struct {
	key     idemstore.Key
	attempt int64
}

// linkCache keeps the span contexts of the last n attempts started.
type linkCache struct {
	mu    sync.Mutex
	n     int
	m     map[attemptKey]trace.SpanContext
	order []attemptKey // a ring of the keys put, oldest at next
	next  int
}

func newLinkCache(n int) *linkCache {
	return &linkCache{n: n, m: make(map[attemptKey]trace.SpanContext)}
}

// put keeps sc for k and reports whether it did.
func (c *linkCache) put(k attemptKey, sc trace.SpanContext) bool {
	if c.n == 0 || !sc.IsValid() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		c.m[k] = sc
		return true
	}
	if len(c.order) < c.n {
		c.order = append(c.order, k)
	} else {
		delete(c.m, c.order[c.next])
		c.order[c.next] = k
		c.next = (c.next + 1) % c.n
	}
	c.m[k] = sc
	return true
}

// forget drops k's span context if it is sc: an attempt that ended with
// its key done is followed by none, and the map keeps only the attempts
// that may be (a ring entry of a key forgotten stays until its turn).
func (c *linkCache) forget(k attemptKey, sc trace.SpanContext) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.m[k]; ok && cur.Equal(sc) {
		delete(c.m, k)
	}
}

func (c *linkCache) get(k attemptKey) (trace.SpanContext, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.m[k]
	return sc, ok
}
