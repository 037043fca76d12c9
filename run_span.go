package idem

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/storeof"
)

// The engine's reports to the idemstore.Spans of a call's context (a
// tracing adapter's): a span per call and per attempt. Without Spans in
// the context they cost a context lookup.

// errTxAgain ends the span of a RunTx body's attempt whose transaction
// the store runs again (a retry of its own, within the attempt).
var errTxAgain = errors.New("idem: the store runs the transaction again")

// startRunSpan reports the start of a call of Run (tx: RunTx) on s for key.
func startRunSpan(ctx context.Context, s idemstore.Store, key Key, cfg *config, tx bool) (context.Context, func(idemstore.SpanEnd)) {
	if !idemstore.Traced(ctx) {
		return ctx, nil
	}
	call := "idem.Run"
	if tx {
		call = "idem.RunTx"
	}
	if cfg.spanCall != "" {
		call = cfg.spanCall
	}
	return idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanRun, Key: key,
		Attrs: runSpanAttrs(call, cfg.mode.name, storeAttr(s))})
}

// runAttrs are the attributes a call's span starts with, for one store
// (its storeAttr), by call (Run, RunTx) and mode (at-least-once,
// at-most-once, two-phase): built once and shared by the calls, which
// idemstore.SpanStart allows (the hooks do not modify them).
type runAttrs [2][3]atomic.Pointer[[]idemstore.Attr]

// runAttrsOf holds the runAttrs of up to maxRunAttrs stores.
var (
	runAttrsOf sync.Map // storeAttr → *runAttrs
	runAttrsN  atomic.Int64
)

const maxRunAttrs = 64

// runSpanAttrs returns the attributes of a call's span: call's, mode's
// and store's, shared when the three are ones that runAttrs keeps.
func runSpanAttrs(call, mode string, store any) []idemstore.Attr {
	c := slices.Index([]string{"idem.Run", "idem.RunTx"}, call)
	m := slices.Index([]string{"at-least-once", "at-most-once", "two-phase"}, mode)
	build := func() []idemstore.Attr {
		return []idemstore.Attr{
			{Key: idemstore.AttrCall, Value: boxed(call)},
			{Key: idemstore.AttrMode, Value: boxed(mode)},
			{Key: idemstore.AttrStore, Value: store},
		}
	}
	if c < 0 || m < 0 {
		return build()
	}
	v, ok := runAttrsOf.Load(store)
	if !ok {
		if runAttrsN.Load() >= maxRunAttrs {
			return build()
		}
		var loaded bool
		if v, loaded = runAttrsOf.LoadOrStore(store, new(runAttrs)); !loaded {
			runAttrsN.Add(1)
		}
	}
	slot := &v.(*runAttrs)[c][m]
	if p := slot.Load(); p != nil {
		return *p
	}
	attrs := build()
	slot.Store(&attrs) // two calls may both build it: either is right
	return attrs
}

// The values a call's span mostly starts with, boxed once: a string
// converted to an any at every call is an allocation.
var (
	boxedRun, boxedRunTx                             any = "idem.Run", "idem.RunTx"
	boxedAtLeastOnce, boxedAtMostOnce, boxedTwoPhase any = "at-least-once", "at-most-once", "two-phase"
	boxedLedger, boxedStateFile                      any = "*idem.Ledger", "*idem.StateFile"
)

// storeNames are the names of the stores' types (fmt's %T) that name no
// store of this package, boxed, by type.
var storeNames sync.Map // reflect.Type → any

// storeAttr is storeof.TypeName(s) as an any, formatted and boxed once
// per type.
func storeAttr(s idemstore.Store) any {
	if n, ok := s.(storeof.Named); ok {
		return boxed(n.StoreName())
	}
	t := reflect.TypeOf(s)
	if v, ok := storeNames.Load(t); ok {
		return v
	}
	v, _ := storeNames.LoadOrStore(t, any(storeof.TypeName(s)))
	return v
}

// boxed returns s as an any, one boxed once if s is one of those.
func boxed(s string) any {
	switch s {
	case "idem.Run":
		return boxedRun
	case "idem.RunTx":
		return boxedRunTx
	case "at-least-once":
		return boxedAtLeastOnce
	case "at-most-once":
		return boxedAtMostOnce
	case "two-phase":
		return boxedTwoPhase
	case "*idem.Ledger":
		return boxedLedger
	case "*idem.StateFile":
		return boxedStateFile
	}
	return s
}

// endRunSpan reports the end of a call with its result.
func endRunSpan(end func(idemstore.SpanEnd), res Result) {
	if end == nil {
		return
	}
	e := idemstore.SpanEnd{Outcome: res.Outcome.String(), Err: res.Err}
	if res.Outcome != Deferred && res.Attempts >= 0 && res.Attempts < len(commonEnds) &&
		res.Attempt >= 0 && res.Attempt < int64(len(commonEnds[0])) {
		e.Attrs = commonEnds[res.Attempts][res.Attempt]
		end(e)
		return
	}
	e.Attrs = endAttrs(res.Attempts, res.Attempt, 3)
	if res.Outcome == Deferred {
		var d *Deferral // allocated here only: errors.As takes its address
		if errors.As(res.Err, &d) {
			e.Attrs = append(e.Attrs, idemstore.Attr{Key: idemstore.AttrReason, Value: d.Reason})
		}
	}
	end(e)
}

// endAttrs returns the attributes of a call's end: attempts and, if not
// 0, attempt, in a slice of capacity n.
func endAttrs(attempts int, attempt int64, n int) []idemstore.Attr {
	attrs := append(make([]idemstore.Attr, 0, n), idemstore.Attr{Key: idemstore.AttrAttempts, Value: attempts})
	if attempt > 0 {
		attrs = append(attrs, idemstore.Attr{Key: idemstore.AttrAttempt, Value: attempt})
	}
	return attrs
}

// commonEnds are the attributes of the ends most calls have (by attempts
// and attempt), built once and shared, which idemstore.SpanEnd allows.
var commonEnds = func() (t [3][16][]idemstore.Attr) {
	for attempts := range t {
		for attempt := range t[attempts] {
			t[attempts][attempt] = slices.Clip(endAttrs(attempts, int64(attempt), 2))
		}
	}
	return t
}()

// startAttemptSpan reports the start of attempt of key; prev is the
// attempt before it (0: none), doubt whether it may have had its effect.
func startAttemptSpan(ctx context.Context, key Key, attempt, prev, revision int64, doubt bool) (context.Context, func(idemstore.SpanEnd)) {
	if !idemstore.Traced(ctx) {
		return ctx, func(idemstore.SpanEnd) {}
	}
	attrs := []idemstore.Attr{{Key: idemstore.AttrAttempt, Value: attempt}}
	if prev > 0 {
		attrs = append(attrs, idemstore.Attr{Key: idemstore.AttrPrevious, Value: prev})
	}
	if revision > 0 {
		attrs = append(attrs, idemstore.Attr{Key: idemstore.AttrRevision, Value: revision})
	}
	if doubt {
		attrs = append(attrs, idemstore.Attr{Key: idemstore.AttrTakeover, Value: true})
	}
	return idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanAttempt, Key: key, Attrs: attrs})
}
