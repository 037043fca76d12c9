package idemstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemstore"
)

type spanKey struct{}

// recorder is a Spans that notes its starts and ends, named.
func recorder(name string, log *[]string) *idemstore.Spans {
	return &idemstore.Spans{
		Start: func(ctx context.Context, s idemstore.SpanStart) (context.Context, func(idemstore.SpanEnd)) {
			*log = append(*log, name+" start "+string(s.Kind))
			return context.WithValue(ctx, spanKey{}, name), func(e idemstore.SpanEnd) {
				*log = append(*log, name+" end "+e.Outcome)
			}
		},
		Inject: func(ctx context.Context, h map[string]string) { h["from-"+name] = name },
	}
}

// TestWithSpansComposes: Spans set in a context that has some already
// are both called, the outer first at a start (the inner one gets its
// context) and last at an end; a crash kit's Trace in the same context
// keeps working.
func TestWithSpansComposes(t *testing.T) {
	var log []string
	stop := errors.New("stop")
	ctx := idemstore.WithTrace(context.Background(), &idemstore.Trace{
		Checkpoint: func(context.Context, idemstore.Point, idemstore.Key) error { return stop }})
	ctx = idemstore.WithSpans(ctx, recorder("outer", &log))
	ctx = idemstore.WithSpans(ctx, recorder("inner", &log))
	sctx, end := idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanRun})
	if sctx.Value(spanKey{}) != "inner" {
		t.Fatalf("the work's context is %v's, want the inner Spans'", sctx.Value(spanKey{}))
	}
	end(idemstore.SpanEnd{Outcome: "ran"})
	want := []string{"outer start run", "inner start run", "inner end ran", "outer end ran"}
	if !slices.Equal(log, want) {
		t.Fatalf("calls %q, want %q", log, want)
	}
	if err := idemstore.Checkpoint(sctx, idemstore.AfterFn, idemstore.Key{Job: "j", Period: "p"}); !errors.Is(err, stop) || !idemstore.IsStop(err) {
		t.Fatalf("the Trace in the same context: %v", err)
	}
	h := idemstore.InjectSpan(ctx, map[string]string{"from-inner": "own"}, false)
	if h["from-outer"] != "outer" || h["from-inner"] != "own" {
		t.Fatalf("injected %v: want outer's added and the caller's kept", h)
	}
	if h := idemstore.InjectSpan(ctx, map[string]string{"from-inner": "own"}, true); h["from-inner"] != "inner" {
		t.Fatalf("injected with replace: %v", h)
	}
}

// TestNoSpans: without Spans, StartSpan returns ctx and a no-op end, and
// InjectSpan the headers as they are.
func TestNoSpans(t *testing.T) {
	ctx := context.Background()
	c, end := idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanRun})
	if c != ctx || end == nil {
		t.Fatal("StartSpan without Spans changed the context or returned no end")
	}
	end(idemstore.SpanEnd{})
	h := map[string]string{"a": "b"}
	if got := idemstore.InjectSpan(ctx, h, false); len(got) != 1 || got["a"] != "b" {
		t.Fatalf("InjectSpan without Spans: %v", got)
	}
	if idemstore.Traced(ctx) {
		t.Fatal("Traced without Spans")
	}
}

// TestWithSpansOnce: the same Spans set twice in a context (an adapter's
// Context applied to a context it made) is called once.
func TestWithSpansOnce(t *testing.T) {
	var log []string
	sp := recorder("one", &log)
	ctx := idemstore.WithSpans(idemstore.WithSpans(context.Background(), sp), sp)
	_, end := idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanAttempt})
	end(idemstore.SpanEnd{})
	if want := []string{"one start attempt", "one end "}; !slices.Equal(log, want) {
		t.Fatalf("calls %q, want %q", log, want)
	}
}

// w3cSpans is a Spans whose Inject writes a W3C trace context: the
// traceparent "new" and tracestate ts (none when empty), plus baggage.
func w3cSpans(ts string) *idemstore.Spans {
	return &idemstore.Spans{Inject: func(_ context.Context, h map[string]string) {
		h["traceparent"] = "new"
		if ts != "" {
			h["tracestate"] = ts
		}
		h["baggage"] = "run=1"
	}}
}

// TestInjectSpanHeaderCase: header names are case-insensitive. A trace
// context the caller set on a message in any case wins whole (its
// traceparent with its tracestate, never the run's tracestate beside it)
// and is stored once, under the W3C name; a relay's replace removes every
// spelling of the stored one. The old InjectSpan kept "Traceparent" and
// added "traceparent": two, the receiver getting either by map order.
func TestInjectSpanHeaderCase(t *testing.T) {
	ctx := idemstore.WithSpans(context.Background(), w3cSpans("run=1"))
	for _, c := range []struct {
		name    string
		headers map[string]string
		replace bool
		want    map[string]string
	}{
		{"caller's context in mixed case", map[string]string{"Traceparent": "caller", "TraceState": "vendor=x", "Baggage": "mine", "X-Tenant": "a"}, false,
			map[string]string{"traceparent": "caller", "tracestate": "vendor=x", "baggage": "mine", "X-Tenant": "a"}},
		{"caller's traceparent alone", map[string]string{"TRACEPARENT": "caller"}, false,
			map[string]string{"traceparent": "caller", "baggage": "run=1"}},
		{"a tracestate without its traceparent", map[string]string{"Tracestate": "vendor=x"}, false,
			map[string]string{"traceparent": "new", "tracestate": "run=1", "baggage": "run=1"}},
		{"relay replaces every spelling", map[string]string{"Traceparent": "caller", "traceparent": "old", "TRACESTATE": "vendor=x", "X-Tenant": "a"}, true,
			map[string]string{"traceparent": "new", "tracestate": "run=1", "baggage": "run=1", "X-Tenant": "a"}},
	} {
		if got := idemstore.InjectSpan(ctx, c.headers, c.replace); !maps.Equal(got, c.want) {
			t.Errorf("%s: InjectSpan(%v, replace %v) = %v, want %v", c.name, c.headers, c.replace, got, c.want)
		}
	}
}

// TestInjectSpanTraceState: a tracestate goes out next to a new
// traceparent only if it is a valid W3C list, cut to 512 characters by
// the W3C rule (members over 128 characters first, then from the end); an
// invalid one (a 10 KB blob, 33 members, a bad key, a key twice) is
// dropped, and so is the stored one it would replace. The old InjectSpan
// forwarded a stored 10 KB tracestate whole when the new context had
// none, and a long one whole when it had it.
func TestInjectSpanTraceState(t *testing.T) {
	member := func(i, n int) string { // a valid member of n characters
		k := fmt.Sprintf("v%02d=", i)
		return k + strings.Repeat("x", n-len(k))
	}
	var long, many []string
	for i := range 32 {
		long = append(long, fmt.Sprintf("v%02d%s=%s", i, strings.Repeat("k", 60), strings.Repeat("x", 256)))
	}
	for i := range 33 {
		many = append(many, member(i, 8))
	}
	mixed := []string{member(0, 100), member(1, 200), member(2, 100), member(3, 100), member(4, 100), member(5, 100)}
	stored := map[string]string{"traceparent": "caller", "tracestate": strings.Repeat("x", 10<<10)}
	for _, c := range []struct {
		name, ts, want string
	}{
		{"none", "", ""},
		{"valid, trimmed", " a=1 ,, b@c=2\t", "a=1,b@c=2"},
		{"10 KB, not a list", strings.Repeat("x", 10<<10), ""},
		{"10 KB valid list", strings.Join(long, ","), long[0]},
		{"long member first", strings.Join(mixed, ","), strings.Join(slices.Delete(slices.Clone(mixed), 1, 2), ",")},
		{"then from the end", strings.Join(append(slices.Clone(mixed), member(6, 100)), ","), strings.Join(slices.Delete(slices.Clone(mixed), 1, 2), ",")},
		{"33 members", strings.Join(many, ","), ""},
		{"bad key", "Vendor=1", ""},
		{"key twice", "a=1,a=2", ""},
		{"value with a space at the end", "a=1 2 ", "a=1 2"},
		{"no value", "a=", ""},
	} {
		ctx := idemstore.WithSpans(context.Background(), w3cSpans(c.ts))
		got := idemstore.InjectSpan(ctx, stored, true)
		ts, ok := got["tracestate"]
		if c.want == "" && ok || c.want != "" && ts != c.want || len(ts) > 512 || got["traceparent"] != "new" {
			t.Errorf("%s: tracestate %.80q (%d characters, present %v), traceparent %q; want %.80q", c.name, ts, len(ts), ok, got["traceparent"], c.want)
		}
	}
}
