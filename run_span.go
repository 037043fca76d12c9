package idem

import (
	"context"
	"errors"
	"reflect"
	"sync"

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
	return idemstore.StartSpan(ctx, idemstore.SpanStart{Kind: idemstore.SpanRun, Key: key, Attrs: []idemstore.Attr{
		{Key: idemstore.AttrCall, Value: boxed(call)},
		{Key: idemstore.AttrMode, Value: boxed(cfg.mode.name)},
		{Key: idemstore.AttrStore, Value: storeAttr(s)},
	}})
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
	e := idemstore.SpanEnd{Outcome: res.Outcome.String(), Err: res.Err, Attrs: make([]idemstore.Attr, 1, 3)}
	e.Attrs[0] = idemstore.Attr{Key: idemstore.AttrAttempts, Value: res.Attempts}
	if res.Attempt > 0 {
		e.Attrs = append(e.Attrs, idemstore.Attr{Key: idemstore.AttrAttempt, Value: res.Attempt})
	}
	if res.Outcome == Deferred {
		var d *Deferral // allocated here only: errors.As takes its address
		if errors.As(res.Err, &d) {
			e.Attrs = append(e.Attrs, idemstore.Attr{Key: idemstore.AttrReason, Value: d.Reason})
		}
	}
	end(e)
}

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
