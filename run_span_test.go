package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemstore"
)

// spanLog is a Spans that notes the attributes of every call's span
// (idemstore.SpanRun) at its start and its end.
type spanLog struct {
	mu     sync.Mutex
	starts [][]idemstore.Attr
	ends   [][]idemstore.Attr
}

func (l *spanLog) spans() *idemstore.Spans {
	return &idemstore.Spans{Start: func(ctx context.Context, s idemstore.SpanStart) (context.Context, func(idemstore.SpanEnd)) {
		if s.Kind != idemstore.SpanRun {
			return ctx, nil
		}
		l.mu.Lock()
		l.starts = append(l.starts, s.Attrs)
		l.mu.Unlock()
		return ctx, func(e idemstore.SpanEnd) {
			l.mu.Lock()
			l.ends = append(l.ends, e.Attrs)
			l.mu.Unlock()
		}
	}}
}

// attrsString formats attrs as key=value pairs.
func attrsString(attrs []idemstore.Attr) string {
	s := ""
	for _, a := range attrs {
		s += fmt.Sprintf("%s=%v ", a.Key, a.Value)
	}
	return s
}

// TestRunSpanAttrs: the attributes of a call's span, which the engine
// builds once per store, call and mode and shares between calls, are
// those of each call: Run and RunTx in every mode, on two ledgers, two
// calls of each (the second one gets what the first built), their ends
// those of each call's result (RunTx takes no mode: at-least-once). A shared slice has no room beyond its
// length, so that a hook's append cannot write into another call's.
func TestRunSpanAttrs(t *testing.T) {
	var log spanLog
	ctx := idemstore.WithSpans(context.Background(), log.spans())
	has := func(context.Context, idem.Key) (bool, error) { return false, nil }
	modes := []struct {
		name string
		opt  idem.Option
	}{{"at-least-once", idem.AtLeastOnce()}, {"at-most-once", idem.AtMostOnce()}, {"two-phase", idem.TwoPhase(has)}}
	var want, wantEnds []string
	for li := range 2 {
		l := openLedger(t, t.TempDir())
		for _, m := range modes {
			for i := range 2 {
				key := idem.Key{Job: fmt.Sprintf("l%d-%s", li, m.name), Period: fmt.Sprint(i)}
				if err := l.Run(ctx, key, func(context.Context) error { return nil }, m.opt); err != nil {
					t.Fatalf("Run(%s): %v", key, err)
				}
				want = append(want, "call=idem.Run mode="+m.name+" store=*idem.Ledger ")
				wantEnds = append(wantEnds, "attempts=1 attempt=1 ")
			}
			// RunTx takes no mode: its span has the default's.
			txKey := idem.Key{Job: fmt.Sprintf("l%d-tx", li), Period: m.name}
			if err := idem.RunTx(ctx, l, txKey, func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatalf("RunTx(%s): %v", txKey, err)
			}
			want = append(want, "call=idem.RunTx mode=at-least-once store=*idem.Ledger ")
			wantEnds = append(wantEnds, "attempts=1 attempt=1 ")
			// A duplicate: no attempt, so no attempt number.
			key := idem.Key{Job: fmt.Sprintf("l%d-%s", li, m.name), Period: "0"}
			if err := l.Run(ctx, key, func(context.Context) error { return nil }, m.opt); err != nil {
				t.Fatalf("Run(%s) again: %v", key, err)
			}
			want = append(want, "call=idem.Run mode="+m.name+" store=*idem.Ledger ")
			wantEnds = append(wantEnds, "attempts=0 ")
		}
	}
	check := func(what string, got [][]idemstore.Attr, want []string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%d %s, want %d", len(got), what, len(want))
		}
		for i, attrs := range got {
			if s := attrsString(attrs); s != want[i] {
				t.Errorf("%s %d: %q, want %q", what, i, s, want[i])
			}
			if cap(attrs) != len(attrs) {
				t.Errorf("%s %d: capacity %d beyond its length %d: a hook's append would write into the shared array", what, i, cap(attrs), len(attrs))
			}
		}
	}
	check("starts", log.starts, want)
	check("ends", log.ends, wantEnds)
}
