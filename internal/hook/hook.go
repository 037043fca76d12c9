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
