package idem

import (
	"context"
	"fmt"
	"reflect"

	"github.com/idemgo/idem/idemstore"
	"github.com/idemgo/idem/internal/storeof"
)

// Store is where Run keeps its records, one per [Key]: what [SetDefault]
// and [RunOn] take. [Ledger] (SQLite), [StateFile], and the stores of
// modules pgledger and redisstore are Stores.
//
// What a store does for Run (claims, leases, done marks) is behind
// package idemstore, out of its users' view: [idemstore.Of] gives it. A
// store of your own implements [idemstore.Store], and is proved with
// package idemtest.
type Store interface {
	// Lookup returns the key's record; ok is false if there is none.
	Lookup(ctx context.Context, key Key) (rec Record, ok bool, err error)
	// Resolve settles a key by hand (see [Ledger.Resolve]).
	Resolve(ctx context.Context, key Key, to Resolution) error
}

// TxStore is a Store whose records live in the database of the business
// data, so that [RunTx] can commit fn's writes with the done mark: Tx is
// the transaction type fn gets (*sql.Tx for [Ledger], pgx.Tx for the
// Postgres ledger). The store's RunTx method is [RunTx] on it; a store of
// your own that implements [idemstore.TxStore] adds it that way.
type TxStore[Tx any] interface {
	Store
	RunTx(ctx context.Context, key Key, fn func(ctx context.Context, tx Tx) error, opts ...Option) error
}

// StoreBehind returns the store behind l, for [idemstore.Of]: what
// Run, the other calls and a store's tools reach l's store methods
// through.
func (l *Ledger) StoreBehind() any {
	if l == nil {
		return nil
	}
	return ledgerStore{l}
}

// StoreBehind returns the store behind f, for [idemstore.Of].
func (f *StateFile) StoreBehind() any {
	if f == nil {
		return nil
	}
	return stateStore{f}
}

// StoreName names the store in messages by its public type.
func (ledgerStore) StoreName() string { return "*idem.Ledger" }

// StoreName names the store in messages by its public type.
func (stateStore) StoreName() string { return "*idem.StateFile" }

// storeFor is the store behind s and the config of the call cl on it
// with opts; an s that is not a store is the config's error, naming s's
// type and the call (a compile-time check given up: Store does not show
// the store methods).
func storeFor(s any, cl call, opts []Option) (idemstore.Store, *config) {
	st, err := idemstore.Of(s)
	cfg := configure(st, cl, opts)
	if err != nil {
		cfg.err = fmt.Errorf("idem: %s: %w", cl.name, err)
	}
	return st, cfg
}

// txStoreFor is storeFor for a call that runs fn in the store's
// transaction of type Tx.
func txStoreFor[Tx any](s any, cl call, opts []Option) (idemstore.TxStore[Tx], *config) {
	st, cfg := storeFor(s, cl, opts)
	txs, ok := st.(idemstore.TxStore[Tx])
	if !ok && cfg.err == nil {
		cfg.err = storeof.Lacks(cl.name, s, reflect.TypeFor[idemstore.TxStore[Tx]]().String())
	}
	return txs, cfg
}

// storeAs is the store behind s ([idemstore.Of]) as a T, the store
// interface that the call named call needs: a compile-time check given up
// (the calls take Store, whose store methods are out of view), so what is
// not one is an error naming the call, s's type and T, returned before
// anything is written.
func storeAs[T any](call string, s any) (T, error) {
	var zero T
	st, err := idemstore.Of(s)
	if err != nil {
		return zero, fmt.Errorf("idem: %s: %w", call, err)
	}
	t, ok := st.(T)
	if !ok {
		return zero, storeof.Lacks(call, s, reflect.TypeFor[T]().String())
	}
	return t, nil
}

// TxStoreOf is s, a store of the store interfaces (a store of your own,
// or the store behind another), as a TxStore: its RunTx is [RunTx] on s.
// idemstore.Of(TxStoreOf(s)) is s, with every interface s implements.
func TxStoreOf[Tx any](s idemstore.TxStore[Tx]) TxStore[Tx] { return txStoreWrap[Tx]{s} }

type txStoreWrap[Tx any] struct{ s idemstore.TxStore[Tx] }

func (t txStoreWrap[Tx]) StoreBehind() any { return t.s }

func (t txStoreWrap[Tx]) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	return t.s.Lookup(ctx, key)
}

func (t txStoreWrap[Tx]) Resolve(ctx context.Context, key Key, to Resolution) error {
	return t.s.Resolve(ctx, key, to)
}

func (t txStoreWrap[Tx]) RunTx(ctx context.Context, key Key, fn func(context.Context, Tx) error, opts ...Option) error {
	return RunTx(ctx, t, key, fn, opts...)
}

// Record is what a store knows of one key: what [Ledger.Lookup] and
// [Ledger.List] return.
type Record = idemstore.Record

// Status is the state of a key's record.
type Status = idemstore.Status

// The statuses a record can have.
const (
	StatusRunning = idemstore.StatusRunning // an attempt holds the key (its lease may have expired)
	StatusFailed  = idemstore.StatusFailed  // the last attempt failed; retry allowed from NotBefore
	StatusDone    = idemstore.StatusDone    // settled: the work is done
	StatusUnknown = idemstore.StatusUnknown // an attempt may or may not have had its effect; awaiting Resolve or a DownstreamHas check
	StatusParked  = idemstore.StatusParked  // the backoff gave up, or fn's error was Permanent: awaiting Reset
	StatusSkipped = idemstore.StatusSkipped // settled without running: catch-up coalesced it into a later period
)

// Filter selects records for [Ledger.List]. Zero fields match everything.
type Filter = idemstore.Filter

// JobState is what a store keeps per job for a catch-up ([CatchUp]): its cursor and
// retention horizon ([Ledger.Job]).
type JobState = idemstore.JobState

// Resolution is what an operator decides for a key with Resolve
// ([Ledger.Resolve]).
type Resolution = idemstore.Resolution

// The resolutions.
const (
	ResolveDone  = idemstore.ResolveDone  // the work did happen: mark the key done
	ResolveRetry = idemstore.ResolveRetry // the work did not happen: allow a new attempt now, failure count cleared
	ResolveSkip  = idemstore.ResolveSkip  // settle without running: catch-up coalesced the period into a later one
)
