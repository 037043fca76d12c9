// Package hook is where the root package idem leaves what it lends the
// subsystem packages of this module (catchup, scheduler): they cannot
// import its unexported engine, and it cannot import them. Package
// internal/core says what the value holds.
package hook

// Root is set by package idem's init; see internal/core.
var Root any

// Relay is set by package outbox's init: it checks a relay's options and
// returns the relay's loop, for a Scheduler's relay (package scheduler).
// Its type is func(idemstore.OutboxStore, outbox.Deliverer, []outbox.Option)
// (func(context.Context), error).
var Relay any

// BindGuard is set by package guard's init: it checks a guard of that
// package (store nil) or binds it to a call's store (a DiskGuard with no
// Path watches the store's file), returning the guard to ask instead (ok
// true) or none (ok false: ask g as it is). Its type is
// func(g any, store any) (bound any, ok bool, err error).
var BindGuard any

// BreakerOf is set by package guard's init: a guard.Breaker's state
// machine (an *internal/breaker.Breaker), for package fanout. Its type is
// func(*guard.Breaker) *breaker.Breaker.
var BreakerOf any
