package idemstore

import (
	"context"
	"maps"
	"slices"
	"strings"
)

// SpanKind names the piece of work a [Spans] hook is told about.
type SpanKind string

// The kinds of work the engine and its subsystem packages report to
// [Spans.Start]. Each is started with the context of the work and ended
// when it ends; the context Start returns is the work's own, so a span
// started for one kind is the parent of what runs inside it.
const (
	// SpanRun is one call of Run, RunTx (a catch-up's period's too) or
	// RunValue, from its start to its return. Attrs: AttrCall, AttrMode,
	// AttrStore. Ended with the call's outcome (Outcome.String()).
	SpanRun SpanKind = "run"
	// SpanAttempt is one attempt of fn, inside a SpanRun: the context
	// handed to fn (and to a RunTx body, where outbox.Put records it) is
	// this span's. Attrs: AttrAttempt; AttrPrevious, the attempt before
	// it (one that failed, or died: a retry), if any; AttrRevision, a
	// re-run's revision (above 0); AttrTakeover (true)
	// when that attempt may have had its effect (its lease ran out while
	// it ran, or its outcome is unknown). Ended with the attempt's error
	// (nil: its done mark is written).
	SpanAttempt SpanKind = "attempt"
	// SpanEach is one call of idem.Each or EachTx (Key is the period).
	// Attrs: AttrWorkers. Ended with the period's outcome.
	SpanEach SpanKind = "each"
	// SpanChunk is one claimed chunk of a fan-out's items, worked by one
	// worker, inside a SpanEach. Attrs: AttrChunk, AttrAttempt, AttrItems.
	SpanChunk SpanKind = "chunk"
	// SpanCatchUp is one pass of idem.CatchUp or RunTx (Key.Period is
	// empty): the periods' SpanRun are inside it. Ended with AttrPeriods.
	SpanCatchUp SpanKind = "catchup"
	// SpanSlot is one look of a Scheduler at a due job (its catch-up, or
	// one period of an overlapping job): Key.Period is the period for
	// the latter, empty for the former.
	SpanSlot SpanKind = "slot"
	// SpanDelivery is one delivery attempt of an outbox message by a
	// relay. Headers are the message's (with the trace context that Put
	// recorded, see [InjectSpan]); Key is the key that queued it. Attrs:
	// AttrMessage, AttrTopic, AttrAttempt. Ended with the delivery's
	// outcome (outbox.DeliveryOutcome.String()) and the deliverer's error.
	SpanDelivery SpanKind = "delivery"
)

// Attribute names that the engine passes in [SpanStart.Attrs] and
// [SpanEnd.Attrs].
const (
	AttrCall     = "call"     // string: the call (idem.Run, idem.RunTx, idem.Each, ...)
	AttrMode     = "mode"     // string: the mode's name (at-least-once, at-most-once, two-phase)
	AttrStore    = "store"    // string: the store's type (*idem.Ledger, ...)
	AttrAttempt  = "attempt"  // int64: the attempt number (fencing token), or a message's delivery attempt
	AttrPrevious = "previous" // int64: the attempt before this one of the key (SpanAttempt of a retry)
	AttrTakeover = "takeover" // bool: the attempt took over one that may have had its effect
	AttrRevision = "revision" // int64: the period's revision, when a re-run's (idem.Rerun; SpanAttempt)
	AttrAttempts = "attempts" // int: attempts of fn within the call (SpanRun's end)
	AttrReason   = "reason"   // string: why a call was deferred (a guard's name, or breaker)
	AttrWorkers  = "workers"  // int: a fan-out's workers
	AttrChunk    = "chunk"    // int64: a fan-out chunk's number
	AttrItems    = "items"    // int: items in a chunk
	AttrPeriods  = "periods"  // int: periods a catch-up pass looked at (SpanCatchUp's end)
	AttrMessage  = "message"  // string: an outbox message's id
	AttrTopic    = "topic"    // string: an outbox message's topic
)

// Attr is an attribute of a span: Value is a string, bool, int or int64.
type Attr struct {
	Key   string
	Value any
}

// SpanStart describes a piece of work that starts. Its Attrs, and a
// [SpanEnd]'s, may be shared between calls: a hook reads them and does not
// modify them.
type SpanStart struct {
	Kind    SpanKind
	Key     Key
	Attrs   []Attr
	Headers map[string]string // SpanDelivery: the message's headers; nil otherwise
}

// SpanEnd describes how a piece of work ended.
type SpanEnd struct {
	Outcome string // the outcome's name; "" where the kind has none
	Err     error
	Attrs   []Attr
}

// Spans hooks tracing into the engine: a tracing adapter (module
// github.com/idemgo/idem/otel) sets it in a context with [WithSpans], and
// every Run, fan-out, catch-up, Scheduler and relay given that context (or
// one derived from it) reports its work to it. Like [Trace], it is carried
// by the context, so it costs nothing when absent. Both may be set in the
// same context; neither replaces the other.
type Spans struct {
	// Start is called when a piece of work starts, with its context; it
	// returns the context of the work (the one passed on to what runs
	// inside it) and the function to call, exactly once, when it ends.
	// Either may be nil (ctx unchanged, nothing to call). It must be
	// safe for concurrent use.
	Start func(ctx context.Context, s SpanStart) (context.Context, func(SpanEnd))

	// Inject writes the trace context of ctx into headers (a propagator's
	// fields: traceparent, tracestate), for outbox.Put (stored with the
	// message) and for a relay's delivery (handed to the deliverer). It
	// may be nil.
	Inject func(ctx context.Context, headers map[string]string)
}

type spansKey struct{}

// spansSet is what a context carries: the Spans set in it, outermost
// first, each once, and their composition.
type spansSet struct {
	all []*Spans
	*Spans
}

// WithSpans returns a context carrying s. If ctx carries other Spans
// already, all are called: the outer ones first at a start (each inner one
// gets the context the one before returned) and last at an end. Spans that
// ctx carries already are not added again: setting the same Spans twice
// (an adapter's Context applied to a context derived from one it made)
// reports each piece of work to it once.
func WithSpans(ctx context.Context, s *Spans) context.Context {
	if s == nil {
		return ctx
	}
	set := &spansSet{all: []*Spans{s}, Spans: s}
	if outer, _ := ctx.Value(spansKey{}).(*spansSet); outer != nil {
		for _, o := range outer.all {
			if o == s {
				return ctx
			}
		}
		set = &spansSet{all: append(append([]*Spans(nil), outer.all...), s), Spans: compose(outer.Spans, s)}
	}
	return context.WithValue(ctx, spansKey{}, set)
}

func compose(outer, inner *Spans) *Spans {
	return &Spans{
		Start: func(ctx context.Context, st SpanStart) (context.Context, func(SpanEnd)) {
			ctx, endOuter := callStart(outer, ctx, st)
			ctx, endInner := callStart(inner, ctx, st)
			return ctx, func(e SpanEnd) {
				if endInner != nil {
					endInner(e)
				}
				if endOuter != nil {
					endOuter(e)
				}
			}
		},
		Inject: func(ctx context.Context, h map[string]string) {
			if outer.Inject != nil {
				outer.Inject(ctx, h)
			}
			if inner.Inject != nil {
				inner.Inject(ctx, h)
			}
		},
	}
}

// spansOf is the composition of the Spans ctx carries, nil if none.
func spansOf(ctx context.Context) *Spans {
	if set, _ := ctx.Value(spansKey{}).(*spansSet); set != nil {
		return set.Spans
	}
	return nil
}

func callStart(s *Spans, ctx context.Context, st SpanStart) (context.Context, func(SpanEnd)) {
	if s.Start == nil {
		return ctx, nil
	}
	c, end := s.Start(ctx, st)
	if c == nil {
		c = ctx
	}
	return c, end
}

// StartSpan reports the start of a piece of work to the [Spans] that ctx
// carries, if any. It returns the work's context and the function to call
// when the work ends (never nil; a no-op without Spans).
func StartSpan(ctx context.Context, s SpanStart) (context.Context, func(SpanEnd)) {
	sp := spansOf(ctx)
	if sp == nil {
		return ctx, noEnd
	}
	c, end := callStart(sp, ctx, s)
	if end == nil {
		end = noEnd
	}
	return c, end
}

func noEnd(SpanEnd) {}

// Traced reports whether ctx carries [Spans].
func Traced(ctx context.Context) bool {
	sp := spansOf(ctx)
	return sp != nil
}

// InjectSpan returns headers with the trace context of ctx written into
// them by the [Spans] that ctx carries: a copy, headers itself left as it
// is; headers itself when ctx carries no Spans with an Inject, or when
// Inject writes nothing.
//
// Header names are case-insensitive: a header of headers whose name
// differs only in case from one that Inject writes is the same header,
// and the result has it once, under Inject's name (traceparent, not
// Traceparent). Without replace, the header that headers has already
// keeps its value (outbox.Put keeps a trace context the caller set on the
// message); with replace, Inject's value wins (a relay's delivery replaces
// the stored context with its own span's, a child of it in the same
// trace).
//
// A W3C trace context travels whole: when Inject writes a traceparent,
// the tracestate beside it in the result is the one that belongs to it.
// If headers sets a traceparent and replace is not set, that is the
// caller's traceparent with the caller's tracestate (or none), and
// Inject's tracestate is not added; otherwise a tracestate of headers is
// dropped, and Inject's is used if it is valid: a list of at most 32
// key=value members by the W3C grammar, cut to 512 characters by the W3C
// rule (members longer than 128 characters go first, then members from
// the end); an invalid one is dropped, not forwarded.
func InjectSpan(ctx context.Context, headers map[string]string, replace bool) map[string]string {
	sp := spansOf(ctx)
	if sp == nil || sp.Inject == nil {
		return headers
	}
	h := map[string]string{}
	sp.Inject(ctx, h)
	if len(h) == 0 {
		return headers
	}
	out := make(map[string]string, len(headers)+len(h))
	maps.Copy(out, headers)
	w3c := false // Inject writes a traceparent: the W3C context travels whole
	for k := range h {
		w3c = w3c || strings.EqualFold(k, traceparent)
	}
	callers := false // the caller's W3C context wins
	if w3c {
		_, set := takeFold(maps.Clone(out), traceparent)
		callers = set && !replace
		for _, name := range []string{traceparent, tracestate} {
			if v, ok := takeFold(out, name); ok && callers {
				out[name] = v // under the W3C name
			}
		}
	}
	for k, v := range h {
		switch {
		case w3c && (strings.EqualFold(k, traceparent) || strings.EqualFold(k, tracestate)):
			if callers {
				continue
			}
			if strings.EqualFold(k, traceparent) {
				out[traceparent] = v
			} else if v, ok := traceState(v); ok {
				out[tracestate] = v
			}
		default:
			if prev, ok := takeFold(out, k); ok && !replace {
				v = prev
			}
			out[k] = v
		}
	}
	return out
}

// The W3C Trace Context headers.
const (
	traceparent = "traceparent"
	tracestate  = "tracestate"
)

// takeFold deletes from h every header named name in any case and
// returns the value of one of them (the one named exactly name, if any).
func takeFold(h map[string]string, name string) (string, bool) {
	var v string
	found := false
	for k, kv := range h {
		if !strings.EqualFold(k, name) {
			continue
		}
		if !found || k == name {
			v = kv
		}
		found = true
		delete(h, k)
	}
	return v, found
}

// W3C Trace Context's limits of a tracestate.
const (
	maxTraceStateMembers = 32
	maxTraceState        = 512 // characters a vendor must propagate, and the most it need
	longTraceStateMember = 128 // members longer than this are cut first
)

// traceState returns ts as a valid W3C tracestate of at most 512
// characters (members trimmed of white space, empty ones left out; cut by
// the W3C rule), or false when ts is not a valid tracestate: more than 32
// members, a member that is not key=value by the grammar, or a key twice.
// An empty result is false too: there is nothing to send.
func traceState(ts string) (string, bool) {
	var members []string
	keys := map[string]bool{}
	for m := range strings.SplitSeq(ts, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		k, v, ok := strings.Cut(m, "=")
		if !ok || !traceStateKey(k) || !traceStateValue(v) || keys[k] {
			return "", false
		}
		keys[k] = true
		members = append(members, m)
		if len(members) > maxTraceStateMembers {
			return "", false
		}
	}
	size := func() int {
		n := max(len(members)-1, 0)
		for _, m := range members {
			n += len(m)
		}
		return n
	}
	for size() > maxTraceState {
		i := len(members) - 1
		for j := len(members) - 1; j >= 0; j-- {
			if len(members[j]) > longTraceStateMember {
				i = j
				break
			}
		}
		members = slices.Delete(members, i, i+1)
	}
	if len(members) == 0 {
		return "", false
	}
	return strings.Join(members, ","), true
}

// traceStateKey: simple-key = lcalpha 0*255(lcalpha / DIGIT / "_" / "-" /
// "*" / "/"), or multi-tenant-key = tenant-id "@" system-id with
// tenant-id = (lcalpha / DIGIT) 0*240(...) and system-id = lcalpha
// 0*13(...).
func traceStateKey(k string) bool {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return keyPart(k, true, 256)
	}
	return keyPart(tenant, false, 241) && keyPart(system, true, 14)
}

func keyPart(s string, alphaFirst bool, most int) bool {
	if s == "" || len(s) > most {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		lower, digit := c >= 'a' && c <= 'z', c >= '0' && c <= '9'
		switch {
		case i == 0 && alphaFirst && !lower:
			return false
		case lower || digit || c == '_' || c == '-' || c == '*' || c == '/':
		default:
			return false
		}
	}
	return true
}

// traceStateValue: value = 0*255(chr) nblk-chr, chr = %x20 / nblk-chr,
// nblk-chr = %x21-2B / %x2D-3C / %x3E-7E (printable ASCII but "," and
// "="; spaces inside, not at the end).
func traceStateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}
