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

func init() {
	storeof.Named = func(s any) string {
		switch s.(type) {
		case ledgerStore:
			return "*idem.Ledger"
		case stateStore:
			return "*idem.StateFile"
		}
		return ""
	}
	storeof.Unwrap = func(s any) any {
		switch s := s.(type) {
		case *Ledger:
			if s != nil {
				return ledgerStore{s}
			}
		case *StateFile:
			if s != nil {
				return stateStore{s}
			}
		}
		return nil
	}
}

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

// JobState is what a store keeps per job for a catch-up (package catchup): its cursor and
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
