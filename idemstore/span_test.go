package idemstore_test

import (
	"context"
	"errors"
	"slices"
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
