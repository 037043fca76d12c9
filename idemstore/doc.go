// Package idemstore defines the interfaces and types that idem's stores
// implement, and the protocol rules they share. Most code should use
// package idem.
//
// A store keeps one [Record] per [Key] and makes each state change of the
// Run protocol atomic: [Store] is what every store implements, and
// [TxStore], [FreshTxStore], [CatchUpStore], [CatchUpTxStore], [Lister],
// [ItemStore], [ItemTxStore] and [Releaser] are what the calls of package
// idem that need more ask for; [Summarizer] and [Pager] what tools that
// show many records (module ui) use when a store has them. The SQLite ledger and the state file of
// package idem, and the Postgres ledger of module
// github.com/idemgo/idem/pgledger, implement them against this package
// alone; so can a store of your own.
//
// The rules that must be the same in every store are functions here, so
// that no store writes them again: [Decide] (what a claim finds and
// whether it takes the key), [TakenOver], [AbandonedNote] and the note
// formats [NoteDied] and [NoteExpired] (what a take-over of a dead attempt
// records; a store that builds the note in SQL passes the formats as
// parameters), [Resolvable] and [Resolved] (what an operator may resolve,
// and what a resolution leaves), [Prunable] (what Prune may forget),
// [CheckEnds] and [EndItems] (an item window's ends), [RunItemWindow]
// (the transaction of an [ItemTxStore]'s window, over a store's
// [ItemWindow]), and [Mismatch] and [KeptFingerprint] (a claim's
// parameter fingerprint: refused when it differs from the record's, kept
// once stored). A store keeps Record.Fingerprint and Record.Value as they
// were written and returns them with a done claim; it writes End.Value
// with a done mark only.
//
// Stores call [Checkpoint] at their crash points ([Point]), which package
// idemtest uses to stop a run as a SIGKILL would; [HolderGone] tells a
// store that a lease's holder has died on this host; and the sentinel
// errors ([ErrLeaseLost], [ErrNotResolvable], ...) are those package idem
// re-exports, so that errors.Is works with either name.
//
// [Spans], carried by the context like [Trace], is how a tracing adapter
// (module github.com/idemgo/idem/otel) hears of the engine's work: a span
// per call, attempt, fan-out chunk, catch-up pass, Scheduler slot and
// outbox delivery ([StartSpan]), and the trace context stored with an
// outbox message ([InjectSpan]). A store need not call them.
//
// Package idemtest proves a store: the conformance suite
// (idemtest.TestStore) and the model-based test (idemtest.TestModel).
package idemstore
